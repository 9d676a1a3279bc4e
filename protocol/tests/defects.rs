//! Regression tests of the defects found by hosts adopting the crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)]

use quirl_lua_protocol::blocking::{ParentClient, WaitReadable};
use quirl_lua_protocol::records::{
    CommandOutcome, ErrorCode, HostCall, Operation, Policy, PolicySettings, WorkerFrame,
};
use quirl_lua_protocol::*;
use std::io::{self, Write};

fn frame(json: &str) -> Vec<u8> {
    frame_payload(json.as_bytes()).unwrap()
}

const INIT_OK: &str =
    r#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#;

/// A `resource_limit` error response to request 2 (SPEC §13.1-a).
const LIMIT: &str = r#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"resource_limit","message":"instruction limit","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}"#;

fn eval() -> Operation {
    Operation::Eval {
        source: "return 1".into(),
    }
}

/// SPEC §16.1-g: output beyond the call's cap reaches the guest as
/// `resource_limit`; the old `call_with_host` returned `invalid_use` and
/// left the connection in `HostCallPending`.
#[test]
fn a_host_answer_over_the_output_cap_reaches_the_guest_as_resource_limit() {
    let call = HostCall {
        request_id: 2,
        call_id: 1,
        command: "ls".into(),
        deadline_ms: 1000,
        max_output_bytes: 4,
    };
    let input = Frames(
        [
            frame(INIT_OK),
            frame_payload(&encode_worker_frame(&WorkerFrame::HostCall { call }).unwrap()).unwrap(),
            frame(r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":7}}"#),
        ]
        .into(),
    );
    let mut client = ParentClient::new(input, Vec::new());
    let policy = Policy::new(PolicySettings {
        allow_process: true,
        ..Policy::quirl_config_profile().settings()
    })
    .unwrap();
    client
        .call(Operation::initialize(policy, None, true))
        .unwrap()
        .unwrap();
    let answer = client
        .call_with_host(eval(), |_| {
            Ok(CommandOutcome {
                status: 0,
                stdout: Some("hello world".into()),
                stderr: None,
            })
        })
        .unwrap();
    assert_eq!(answer, Ok(records::OperationResult::Value(7.into())));
    assert_eq!(client.connection().state(), SessionState::Ready);
    let written = String::from_utf8_lossy(client.writer()).into_owned();
    assert!(written.contains(r#""kind":"host_response""#), "{written}");
    assert!(written.contains(r#""code":"resource_limit""#), "{written}");
    assert!(!written.contains("hello world"), "{written}");
}

/// A reader that hands out one frame per `read`, as a worker writes them.
struct Frames(std::collections::VecDeque<Vec<u8>>);

impl io::Read for Frames {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let Some(next) = self.0.pop_front() else {
            return Ok(0);
        };
        buffer[..next.len()].copy_from_slice(&next);
        Ok(next.len())
    }
}

/// Frames already written are readable at once (the client's calls wait
/// for input under the request deadline, SPEC §10).
impl WaitReadable for Frames {
    fn wait_readable(&mut self, _timeout: std::time::Duration) -> io::Result<bool> {
        Ok(true)
    }
}

/// A writer whose pipe has no reader any more.
struct ClosedPipe;

impl Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// SPEC §13.1-b: a worker that retired after a `resource_limit` answer
/// gives `worker_retired` and the `Retired` state on the next call,
/// whether the parent notices the end of its stream (read) or its closed
/// stdin (write). The old code gave `unexpected_end` with poison, or
/// `io_error` with the state left `Busy`.
#[test]
fn a_retired_worker_gives_the_same_result_whichever_side_notices() {
    let mut input = frame(INIT_OK);
    input.extend(frame(LIMIT));
    // Read side: the request is written, then the stream ends.
    let mut client = ParentClient::new(Frames([frame(INIT_OK), frame(LIMIT)].into()), Vec::new());
    let init = Operation::initialize(Policy::quirl_config_profile(), None, false);
    client.call(init.clone()).unwrap().unwrap();
    let limited = client.call(eval()).unwrap().unwrap_err();
    assert_eq!(limited.code, ErrorCode::ResourceLimit);
    assert!(client.connection().may_have_retired());
    let read_side = client.call(eval()).unwrap_err();
    assert_eq!(read_side.kind(), ErrorKind::WorkerRetired);
    assert_eq!(client.connection().state(), SessionState::Retired);
    assert!(client.connection().poison_cause().is_none());
    assert_eq!(
        client.call(eval()).unwrap_err().kind(),
        ErrorKind::WorkerRetired
    );

    // Write side: the worker's stdin is already closed.
    let mut connection = ParentConnection::new();
    connection.request(init).unwrap();
    connection.feed(&frame(INIT_OK)).unwrap();
    connection.poll_event().unwrap();
    connection.request(eval()).unwrap();
    connection.feed(&frame(LIMIT)).unwrap();
    connection.poll_event().unwrap();
    connection.take_outgoing();
    connection.request(eval()).unwrap();
    let error = ProtocolError::io("writing frames", io::ErrorKind::BrokenPipe.into());
    let write_side = connection.write_failed(error);
    assert_eq!(write_side.kind(), ErrorKind::WorkerRetired);
    assert_eq!(connection.state(), SessionState::Retired);
    assert!(connection.outgoing().is_empty());
    let _ = ClosedPipe.flush();
}

/// The blocking client on a closed pipe after the retirement.
#[test]
fn a_retired_worker_found_by_a_failed_write_is_retired() {
    let mut client = ParentClient::new(Frames([frame(INIT_OK), frame(LIMIT)].into()), Vec::new());
    client
        .call(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap()
        .unwrap();
    client.call(eval()).unwrap().unwrap_err();
    let (connection, _, _) = client.into_parts();
    let _ = connection;
    // A failed write of a later request without a prior limit is no retirement.
    let mut fresh = ParentConnection::new();
    let error = ProtocolError::io("writing frames", io::ErrorKind::BrokenPipe.into());
    assert_eq!(fresh.write_failed(error).kind(), ErrorKind::IoError);
    let mut client = ParentClient::new(&b""[..], ClosedPipe);
    assert_eq!(
        client
            .request(Operation::initialize(
                Policy::quirl_config_profile(),
                None,
                false
            ))
            .unwrap_err()
            .kind(),
        ErrorKind::IoError
    );
}

/// SPEC §11.3: the error classes a caller needs, without matching kinds.
#[test]
fn errors_tell_their_class_and_the_code_of_spec_11_3() {
    let timed_out = ProtocolError::io("waiting", io::ErrorKind::TimedOut.into());
    assert!(timed_out.is_timed_out() && !timed_out.is_peer_gone());
    assert_eq!(timed_out.code(), ErrorCode::ResourceLimit);
    let crashed = ProtocolError::new(ErrorKind::UnexpectedEnd, "gone");
    assert!(crashed.is_peer_gone() && !crashed.is_protocol_violation());
    assert_eq!(crashed.code(), ErrorCode::Lua);
    assert_eq!(ErrorKind::WorkerRetired.code(), ErrorCode::Lua);
    let pipe = ProtocolError::io("writing", io::ErrorKind::BrokenPipe.into());
    assert!(pipe.is_peer_gone() && !pipe.is_nothing_sent());
    assert_eq!(pipe.code(), ErrorCode::Io);
    let mistake = ProtocolError::new(ErrorKind::InvalidUse, "busy");
    assert!(mistake.is_caller_mistake() && mistake.is_nothing_sent());
    assert!(!mistake.is_protocol_violation());
    let violation = decode_worker_frame(b"{}").unwrap_err();
    assert!(violation.is_protocol_violation() && !violation.is_peer_gone());
    assert_eq!(violation.code(), ErrorCode::Validation);
}
