//! What a host needs beyond `call`: typed calls (`operations`), a
//! cancellation it already has (an `Arc<AtomicBool>`, a predicate, a tokio
//! future), the deadline after a host callback in a loop of its own
//! (SPEC §10: host calls count), and the violation behind a failed write
//! (SPEC §13.2: the parent reports what the worker did, not the broken pipe
//! it left). Silent pipes and callbacks make the cancellation or the
//! deadline the only way out; no test asserts how long anything took
//! (BENCHMARKS.md X7 measures the cancellation latency).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)]

use quirl_lua_protocol::blocking::{FrameReader, ParentClient};
use quirl_lua_protocol::cancellation::Cancellation;
use quirl_lua_protocol::limits::FRAME_BYTES_MAX;
use quirl_lua_protocol::operations::{Eval, Initialize, Test};
use quirl_lua_protocol::records::{CommandOutcome, HostCall, Policy, PolicySettings, WorkerFrame};
use quirl_lua_protocol::{
    ErrorKind, ParentEvent, ProtocolError, SessionState, encode_worker_frame, frame_payload,
};
use serde_json::json;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const INIT_OK: &str =
    r#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#;
const EVAL_OK: &str = r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":7}}"#;
const TEST_OK: &str = r#"{"kind":"response","response":{"version":1,"id":3,"ok":true,"result":4}}"#;

fn frame(json: &str) -> Vec<u8> {
    frame_payload(json.as_bytes()).unwrap()
}

fn policy(wall_time_ms: u64) -> Policy {
    Policy::new(PolicySettings {
        allow_process: true,
        wall_time_ms,
        ..Policy::quirl_config_profile().settings()
    })
    .unwrap()
}

fn init(wall_time_ms: u64) -> Initialize {
    Initialize::new(policy(wall_time_ms)).process_enabled(true)
}

fn host_call_frame() -> Vec<u8> {
    let call = HostCall {
        request_id: 2,
        call_id: 1,
        command: "ls".into(),
        deadline_ms: 100,
        max_output_bytes: 64,
    };
    frame_payload(&encode_worker_frame(&WorkerFrame::HostCall { call }).unwrap()).unwrap()
}

/// A length prefix one past the maximum (SPEC §4.3-b: `oversized_frame`).
fn oversized_header() -> [u8; 4] {
    u32::try_from(FRAME_BYTES_MAX + 1).unwrap().to_be_bytes()
}

fn outcome() -> CommandOutcome {
    CommandOutcome {
        status: 0,
        stdout: Some("ok".into()),
        stderr: None,
    }
}

/// Reads the parent's requests on the worker's stdin and hands each to
/// `then`, until the parent closes it.
fn read_requests(
    stdin: io::PipeReader,
    mut then: impl FnMut(usize) + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut requests = FrameReader::new(stdin);
        let mut all = Vec::new();
        let mut count = 0;
        while let Ok(Some(payload)) = requests.next_payload() {
            count += 1;
            all.extend(payload);
            then(count);
        }
        all
    })
}

// ---- typed calls ----

/// SPEC §7.2: each typed operation answers with its own result type; no
/// variant to match.
#[cfg(unix)]
#[test]
fn typed_calls_answer_with_the_operations_own_result_type() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    let answers = [INIT_OK, EVAL_OK, TEST_OK];
    let worker = read_requests(worker_stdin, move |count| {
        worker_side.write_all(&frame(answers[count - 1])).unwrap();
    });
    let mut client = ParentClient::new(reader, stdin_writer);
    let () = client.call(init(1_000)).unwrap().unwrap();
    let value: serde_json::Value = client.call(Eval::new("return 7")).unwrap().unwrap();
    assert_eq!(value, json!(7));
    let tests: u64 = client
        .call(Test {
            source: "return {}".into(),
            source_name: "t.lua".into(),
        })
        .unwrap()
        .unwrap();
    assert_eq!(tests, 4);
    drop(client);
    let written = String::from_utf8(worker.join().unwrap()).unwrap();
    assert!(written.contains(r#""operation":"test","source":"return {}""#));
}

// ---- a cancellation the host already has ----

/// The host's own `Arc<AtomicBool>`, set by another thread while the call
/// waits for a silent worker (the request's deadline a minute away), ends
/// the call with `cancelled`; the connection must be killed, and the
/// client stays cancelled even after the host clears its flag.
#[cfg(unix)]
#[test]
fn a_flag_the_host_owns_ends_a_blocked_call() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    let mut client = ParentClient::new(reader, stdin_writer);
    client.cancel_on(Arc::clone(&flag));
    client.call(init(60_000)).unwrap().unwrap();
    let setter = Arc::clone(&flag);
    let worker = read_requests(worker_stdin, move |count| {
        if count == 2 {
            setter.store(true, Ordering::Release);
        }
    });
    let error = client.call(Eval::new("return 7")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
    assert!(client.connection().must_kill());
    flag.store(false, Ordering::Release);
    assert!(
        client
            .call(Eval::new("return 8"))
            .unwrap_err()
            .is_cancelled()
    );
    drop(client);
    let written = String::from_utf8(worker.join().unwrap()).unwrap();
    assert!(written.contains("return 7") && !written.contains("return 8"));
    drop(worker_side);
}

/// A predicate is a cancellation too; once it holds before a call, the
/// request is not even written.
#[test]
fn a_predicate_that_holds_refuses_the_next_request() {
    let answers = frame(INIT_OK);
    let mut client = ParentClient::new(&answers[..], Vec::new());
    let stop = Arc::new(AtomicBool::new(false));
    let watched = Arc::clone(&stop);
    client.cancel_on(Cancellation::when(move || watched.load(Ordering::Acquire)));
    client.call(init(1_000)).unwrap().unwrap();
    let written = client.writer().len();
    stop.store(true, Ordering::Release);
    let error = client.call(Eval::new("return 7")).unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    assert_eq!(client.writer().len(), written, "nothing more was written");
    assert_eq!(client.connection().state(), SessionState::Abandoned);
}

/// SPEC §17.1: cancellation is observed while a host call runs too; a
/// callback that returns after the flag was set gets no answer sent.
#[cfg(unix)]
#[test]
fn a_flag_set_during_a_host_callback_ends_the_call_when_it_returns() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    let mut client = ParentClient::new(reader, stdin_writer);
    client.cancel_on(Arc::clone(&flag));
    client.call(init(60_000)).unwrap().unwrap();
    let worker = read_requests(worker_stdin, move |count| {
        if count == 2 {
            worker_side.write_all(&host_call_frame()).unwrap();
        }
    });
    let error = client
        .call_with_host(Eval::new("return 7"), |_| {
            flag.store(true, Ordering::Release);
            Ok(outcome())
        })
        .unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    drop(client);
    let written = String::from_utf8(worker.join().unwrap()).unwrap();
    assert!(!written.contains("host_response"), "{written}");
}

// ---- hosts that drive their own loop ----

/// SPEC §10: a host that answers host calls itself is held to the
/// request's deadline: after a command that outlived it, `host_response`
/// refuses with `deadline_passed` and writes nothing; `check_deadline`
/// says so first.
#[cfg(unix)]
#[test]
fn an_own_loop_answer_after_the_deadline_is_refused_and_not_written() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(init(30)).unwrap().unwrap();
    client.request(Eval::new("return 7").into()).unwrap();
    worker_side.write_all(&host_call_frame()).unwrap();
    let event = client
        .next_event_before(Instant::now() + Duration::from_secs(30))
        .unwrap();
    assert!(matches!(event, Some(ParentEvent::HostCall(_))));
    client.check_deadline().unwrap(); // still in time
    std::thread::sleep(Duration::from_millis(60)); // the host's command
    let written = client.writer().len();
    let late = client.check_deadline().unwrap_err();
    assert_eq!(late.kind(), ErrorKind::DeadlinePassed);
    let refused = client.host_response(Ok(outcome())).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::DeadlinePassed, "{refused}");
    assert_eq!(client.writer().len(), written, "no answer was written");
    assert!(client.connection().must_kill());
}

/// The same without `check_deadline`: `host_response_or_error` checks it.
#[cfg(unix)]
#[test]
fn an_own_loop_host_response_or_error_checks_the_deadline_itself() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(init(20)).unwrap().unwrap();
    client.request(Eval::new("return 7").into()).unwrap();
    worker_side.write_all(&host_call_frame()).unwrap();
    client
        .next_event_before(Instant::now() + Duration::from_secs(30))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let written = client.writer().len();
    let refused = client.host_response_or_error(Ok(outcome())).unwrap_err();
    assert!(refused.is_timed_out(), "{refused}");
    assert_eq!(client.writer().len(), written);
}

// ---- the violation behind a failed write ----

/// A worker that sent an oversized frame header and went away (SPEC
/// §4.3-b) leaves a closed stdin behind: the call reports
/// `oversized_frame`, the worker's violation, with the write error as
/// context — not the broken pipe.
#[cfg(unix)]
#[test]
fn a_failed_write_reports_the_violation_the_worker_had_sent() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, stdin_writer);
    client.call(init(60_000)).unwrap().unwrap();
    worker_side.write_all(&oversized_header()).unwrap();
    drop(worker_stdin); // the worker is gone; its stderr is still held here
    let error = client.call(Eval::new("return 7")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OversizedFrame, "{error}");
    assert!(error.context().contains("writing failed"), "{error:?}");
    assert_eq!(client.connection().state(), SessionState::Poisoned);
    drop(worker_side);
}

/// Hosts with their own loop ask for the same explanation; when the
/// worker's stream holds nothing, the write error stands, and asking
/// never waits for the worker.
#[cfg(unix)]
#[test]
fn explain_write_failure_reads_only_what_is_there() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, stdin_writer);
    client.call(init(60_000)).unwrap().unwrap();
    drop(worker_stdin);
    let failed = client.request(Eval::new("return 7").into()).unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::IoError);
    // Nothing in the worker's stream, which is still open: unchanged.
    let unexplained = client.explain_write_failure(failed.clone());
    assert_eq!(unexplained.kind(), ErrorKind::IoError);
    // A malformed frame arrives: now it explains the failure.
    worker_side.write_all(&frame("{nope")).unwrap();
    let explained = client.explain_write_failure(failed);
    assert_eq!(explained.kind(), ErrorKind::MalformedJson, "{explained}");
    // Not an I/O error: nothing to explain.
    let other = ProtocolError::new(ErrorKind::InvalidUse, "the caller's mistake");
    assert_eq!(
        client.explain_write_failure(other).kind(),
        ErrorKind::InvalidUse
    );
}

// ---- the tokio adapter ----

#[cfg(feature = "tokio")]
mod async_adapter {
    use super::*;
    use quirl_lua_protocol::records::Operation;
    use quirl_lua_protocol::tokio_io::ParentClient;
    use tokio::io::AsyncWriteExt;

    type Client = ParentClient<
        ::tokio::io::ReadHalf<::tokio::io::DuplexStream>,
        ::tokio::io::WriteHalf<::tokio::io::DuplexStream>,
    >;

    fn pair() -> (Client, ::tokio::io::DuplexStream) {
        let (parent_end, worker_end) = ::tokio::io::duplex(1 << 16);
        let (read, write) = ::tokio::io::split(parent_end);
        (ParentClient::new(read, write), worker_end)
    }

    /// A host's flag, set by another task while a call waits for a silent
    /// worker, ends the call with `cancelled`.
    #[::tokio::test(flavor = "current_thread")]
    async fn a_flag_the_host_owns_ends_an_async_call() {
        let (mut parent, mut worker_end) = pair();
        worker_end.write_all(&frame(INIT_OK)).await.unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        parent.cancel_on(Arc::clone(&flag));
        parent.call(init(60_000)).await.unwrap().unwrap();
        let setter = Arc::clone(&flag);
        ::tokio::spawn(async move {
            ::tokio::time::sleep(Duration::from_millis(20)).await;
            setter.store(true, Ordering::Release);
        });
        let error = parent.call(Eval::new("return 7")).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
        assert!(parent.connection().must_kill());
        drop(worker_end);
    }

    /// A future (here a oneshot receiver) cancels at once, also while the
    /// async host callback runs: the callback's future is dropped.
    #[::tokio::test(flavor = "current_thread")]
    async fn a_future_cancels_a_call_and_drops_its_host_callback() {
        let (mut parent, mut worker_end) = pair();
        worker_end.write_all(&frame(INIT_OK)).await.unwrap();
        let (stop, stopped) = ::tokio::sync::oneshot::channel::<()>();
        parent.cancel_when(async move {
            let _ = stopped.await;
        });
        parent.call(init(60_000)).await.unwrap().unwrap();
        worker_end.write_all(&host_call_frame()).await.unwrap();
        let mut stop = Some(stop);
        let error = parent
            .call_with_host(Eval::new("return 7"), async |_: &HostCall| {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                std::future::pending::<()>().await;
                Ok(outcome())
            })
            .await
            .unwrap_err();
        assert!(error.is_cancelled(), "{error}");
        assert!(parent.connection().must_kill());
        // Final: the next call is refused before anything is written.
        assert!(
            parent
                .call(Eval::new("return 8"))
                .await
                .unwrap_err()
                .is_cancelled()
        );
    }

    /// SPEC §10 in a host's own async loop: the answer after the deadline
    /// is refused and not written.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_own_loop_async_answer_after_the_deadline_is_refused() {
        let (mut parent, mut worker_end) = pair();
        worker_end.write_all(&frame(INIT_OK)).await.unwrap();
        parent.call(init(30)).await.unwrap().unwrap();
        parent
            .request(Operation::Eval {
                source: "return 7".into(),
            })
            .await
            .unwrap();
        worker_end.write_all(&host_call_frame()).await.unwrap();
        let event = parent.next_event().await.unwrap();
        assert!(matches!(event, Some(ParentEvent::HostCall(_))));
        ::tokio::time::sleep(Duration::from_millis(60)).await;
        let refused = parent.host_response(Ok(outcome())).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::DeadlinePassed, "{refused}");
        assert!(parent.connection().must_kill());
    }

    /// The worker's oversized header, then it is gone: the async call
    /// reports `oversized_frame`, not the failed write.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_async_failed_write_reports_the_violation_the_worker_had_sent() {
        let (mut parent, mut worker_end) = pair();
        worker_end.write_all(&frame(INIT_OK)).await.unwrap();
        parent.call(init(60_000)).await.unwrap().unwrap();
        worker_end.write_all(&oversized_header()).await.unwrap();
        drop(worker_end);
        let error = parent.call(Eval::new("return 7")).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::OversizedFrame, "{error}");
        assert_eq!(parent.connection().state(), SessionState::Poisoned);
    }
}
