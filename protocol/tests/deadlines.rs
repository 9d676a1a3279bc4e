//! Deadlines and lifecycle in the parent's connection and both adapters
//! (issue 24): the deadline of SPEC §10 (the policy's `wall_time_ms` from
//! sending, host calls included), `next_deadline`, `handle_timeout` to the
//! `Abandoned` state whose worker must be killed (SPEC §13.2), refusals
//! afterwards, cancellation, async host callbacks, and the one read
//! deadline name `next_event_before(Instant)`.
//!
//! The sans-IO tests hand the connection instants and assert exact
//! arithmetic. The adapter tests use silent pipes or callbacks that never
//! finish, so a deadline is the only way out; no test asserts how long
//! anything took.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)]

mod common;

use quirl_lua_protocol::blocking::ParentClient;
use quirl_lua_protocol::records::{
    CommandOutcome, ErrorCode, HostCall, Operation, Policy, PolicySettings, StrictDecode,
    WorkerFrame,
};
use quirl_lua_protocol::{
    ErrorKind, ParentConnection, ParentEvent, ProtocolError, SessionState, encode_worker_frame,
    frame_payload,
};
use serde_json::json;
use std::io::{self, Write};
use std::time::{Duration, Instant};

const INIT_OK: &str =
    r#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#;
const EVAL_OK: &str = r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":7}}"#;

fn frame(json: &str) -> Vec<u8> {
    frame_payload(json.as_bytes()).unwrap()
}

fn policy(wall_time_ms: u64, allow_process: bool) -> Policy {
    Policy::new(PolicySettings {
        allow_process,
        wall_time_ms,
        ..Policy::quirl_config_profile().settings()
    })
    .unwrap()
}

fn init(wall_time_ms: u64) -> Operation {
    Operation::initialize(policy(wall_time_ms, true), None, true)
}

fn eval() -> Operation {
    Operation::Eval {
        source: "return 7".into(),
    }
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

fn outcome(stdout: &str) -> CommandOutcome {
    CommandOutcome {
        status: 0,
        stdout: Some(stdout.into()),
        stderr: None,
    }
}

/// A connection whose `initialize` (policy `wall_time_ms`) was answered.
fn ready(wall_time_ms: u64, at: Instant) -> ParentConnection {
    let mut connection = ParentConnection::new();
    connection.request_at(init(wall_time_ms), at).unwrap();
    connection.feed(&frame(INIT_OK)).unwrap();
    connection.poll_event().unwrap().unwrap();
    connection.take_outgoing();
    connection
}

fn assert_refused_as_timed_out(error: &ProtocolError) {
    assert_eq!(error.kind(), ErrorKind::DeadlinePassed, "{error}");
    assert!(error.is_timed_out(), "{error}");
    assert_eq!(error.code(), ErrorCode::ResourceLimit, "SPEC §11.3");
}

/// SPEC §10: `wall_time_ms` after sending; `initialize` by the startup
/// timeout; `plugin_command` by its `deadline_ms`; a caller's own
/// deadline; no deadline without a clock.
#[test]
fn the_deadline_is_the_policy_budget_after_the_request_was_sent() {
    let t0 = Instant::now();
    let mut connection = ParentConnection::new();
    assert_eq!(connection.next_deadline(), None, "nothing in flight");
    connection.set_startup_timeout(Duration::from_millis(1500));
    connection.request_at(init(250), t0).unwrap();
    assert_eq!(
        connection.next_deadline(),
        Some(t0 + Duration::from_millis(1500))
    );
    connection.feed(&frame(INIT_OK)).unwrap();
    connection.poll_event().unwrap().unwrap();
    assert_eq!(connection.next_deadline(), None, "answered");

    let t1 = t0 + Duration::from_secs(3);
    connection.request_at(eval(), t1).unwrap();
    assert_eq!(
        connection.next_deadline(),
        Some(t1 + Duration::from_millis(250))
    );
    connection.feed(&frame(EVAL_OK)).unwrap();
    connection.poll_event().unwrap().unwrap();

    let t2 = t1 + Duration::from_secs(1);
    let plugin = Operation::from_json_value(&json!({
        "operation": "plugin_command", "name": "hi", "context": common::context(), "deadline_ms": 40
    }))
    .unwrap();
    let id = connection.request_at(plugin, t2).unwrap();
    assert_eq!(
        connection.next_deadline(),
        Some(t2 + Duration::from_millis(40))
    );
    connection
        .feed(&frame(&format!(
            r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":false,"result":null,"error":{{"code":"lua","message":"no","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}}}}"#
        )))
        .unwrap();
    connection.poll_event().unwrap().unwrap();

    let own = t2 + Duration::from_millis(5);
    connection.request_with_deadline(eval(), t2, own).unwrap();
    assert_eq!(connection.next_deadline(), Some(own));
}

#[test]
fn a_request_sent_without_a_clock_has_no_deadline() {
    let mut connection = ParentConnection::new();
    connection.request(init(250)).unwrap();
    assert_eq!(connection.next_deadline(), None);
    connection
        .handle_timeout(Instant::now() + Duration::from_secs(3600))
        .unwrap();
    assert_eq!(connection.state(), SessionState::Initializing);
}

/// `handle_timeout` before the deadline changes nothing; at it the
/// connection is `Abandoned`, the worker must be killed (SPEC §13.2), and
/// nothing unwritten is sent.
#[test]
fn handle_timeout_at_the_deadline_abandons_and_says_kill() {
    let t0 = Instant::now();
    let mut connection = ready(200, t0);
    let t1 = t0 + Duration::from_secs(1);
    connection.request_at(eval(), t1).unwrap();
    let due = t1 + Duration::from_millis(200);
    connection
        .handle_timeout(due - Duration::from_nanos(1))
        .unwrap();
    assert_eq!(connection.state(), SessionState::Busy);
    assert!(!connection.must_kill());
    assert!(
        !connection.outgoing().is_empty(),
        "the request is unwritten"
    );

    let error = connection.handle_timeout(due).unwrap_err();
    assert_refused_as_timed_out(&error);
    assert!(error.message().contains("request 2 (eval)"), "{error}");
    assert!(!error.is_nothing_sent(), "the request was sent");
    assert!(!error.is_protocol_violation());
    assert_eq!(connection.state(), SessionState::Abandoned);
    assert!(connection.must_kill());
    assert!(connection.poison_cause().is_none(), "not a violation");
    assert_eq!(connection.in_flight(), None);
    assert_eq!(connection.next_deadline(), None);
    assert!(
        connection.outgoing().is_empty(),
        "stop writing (SPEC §13.2)"
    );
}

/// After `handle_timeout` every call is refused as timed out, and the
/// killed worker's stream may be drained into the connection.
#[test]
fn every_call_after_the_deadline_is_refused_as_timed_out() {
    let t0 = Instant::now();
    let mut connection = ready(100, t0);
    connection.request_at(eval(), t0).unwrap();
    connection.take_outgoing();
    connection
        .handle_timeout(t0 + Duration::from_millis(100))
        .unwrap_err();
    assert_refused_as_timed_out(&connection.request(eval()).unwrap_err());
    assert_refused_as_timed_out(&connection.request_at(eval(), t0).unwrap_err());
    assert_refused_as_timed_out(&connection.host_response(Ok(outcome("x"))).unwrap_err());
    assert_refused_as_timed_out(&connection.poll_event().unwrap_err());
    assert_refused_as_timed_out(&connection.end_of_stream().unwrap_err());
    assert_refused_as_timed_out(&connection.handle_timeout(t0).unwrap_err());
    // The answer that came too late is dropped, never an event.
    connection.feed(&frame(EVAL_OK)).unwrap();
    assert_refused_as_timed_out(&connection.poll_event().unwrap_err());
    assert!(connection.outgoing().is_empty(), "nothing was sent");
    assert_eq!(connection.state(), SessionState::Abandoned);
}

/// SPEC §10: host calls count; the deadline does not move while the host
/// runs a command or after it answered.
#[test]
fn host_call_time_counts_in_the_deadline() {
    let t0 = Instant::now();
    let mut connection = ready(300, t0);
    let t1 = t0 + Duration::from_secs(1);
    connection.request_at(eval(), t1).unwrap();
    let due = t1 + Duration::from_millis(300);
    connection.feed(&host_call_frame()).unwrap();
    assert!(matches!(
        connection.poll_event().unwrap(),
        Some(ParentEvent::HostCall(_))
    ));
    assert_eq!(connection.state(), SessionState::HostCallPending);
    assert_eq!(connection.next_deadline(), Some(due));
    connection.host_response(Ok(outcome("a"))).unwrap();
    assert_eq!(
        connection.next_deadline(),
        Some(due),
        "unchanged by the answer"
    );
    // Reached while the host call is pending, the deadline abandons too.
    let mut pending = ready(300, t0);
    pending.request_at(eval(), t1).unwrap();
    pending.feed(&host_call_frame()).unwrap();
    pending.poll_event().unwrap().unwrap();
    let error = pending.handle_timeout(due).unwrap_err();
    assert_refused_as_timed_out(&error);
    assert_eq!(pending.state(), SessionState::Abandoned);
    assert_refused_as_timed_out(&pending.host_response(Ok(outcome("late"))).unwrap_err());
}

#[test]
fn an_answer_in_time_clears_the_deadline() {
    let t0 = Instant::now();
    let mut connection = ready(50, t0);
    connection.request_at(eval(), t0).unwrap();
    connection.feed(&frame(EVAL_OK)).unwrap();
    connection.poll_event().unwrap().unwrap();
    connection
        .handle_timeout(t0 + Duration::from_secs(3600))
        .unwrap();
    assert_eq!(connection.state(), SessionState::Ready);
    assert!(!connection.must_kill());
}

/// A cancellation is an abandonment too (SPEC §13.2), reported as
/// `resource_limit` (SPEC §11.3), and final.
#[test]
fn cancel_abandons_the_session_with_cancelled() {
    let t0 = Instant::now();
    let mut connection = ready(1000, t0);
    connection.request_at(eval(), t0).unwrap();
    let error = connection.cancel();
    assert_eq!(error.kind(), ErrorKind::Cancelled);
    assert!(error.is_cancelled() && !error.is_timed_out());
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert_eq!(connection.state(), SessionState::Abandoned);
    assert!(connection.must_kill());
    let later = connection.request(eval()).unwrap_err();
    assert!(later.is_cancelled(), "{later}");
    assert_eq!(connection.cancel().kind(), ErrorKind::Cancelled);
}

/// Poisoned workers must be killed too; a retired one exited by itself.
#[test]
fn must_kill_covers_poisoned_but_not_retired() {
    let t0 = Instant::now();
    let mut poisoned = ready(1000, t0);
    poisoned.feed(&frame(EVAL_OK)).unwrap();
    poisoned.request_at(eval(), t0).unwrap_err();
    assert_eq!(poisoned.state(), SessionState::Poisoned);
    assert!(poisoned.must_kill());
    assert_eq!(poisoned.next_deadline(), None);

    let limit = r#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"resource_limit","message":"instruction limit","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}"#;
    let mut retired = ready(1000, t0);
    retired.request_at(eval(), t0).unwrap();
    retired.feed(&frame(limit)).unwrap();
    retired.poll_event().unwrap().unwrap();
    retired.end_of_stream().unwrap();
    assert_eq!(retired.state(), SessionState::Retired);
    assert!(!retired.must_kill());
}

// ---- the blocking adapter ----

/// A blocking `call` to a silent worker ends at the request's deadline,
/// the connection abandoned; later calls write nothing.
#[cfg(unix)]
#[test]
fn a_blocking_call_ends_at_the_request_deadline() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(init(30)).unwrap().unwrap();
    let error = client.call(eval()).unwrap_err();
    assert_refused_as_timed_out(&error);
    assert_eq!(client.connection().state(), SessionState::Abandoned);
    assert!(client.connection().must_kill());
    let written = client.writer().len();
    assert_refused_as_timed_out(&client.call(eval()).unwrap_err());
    assert_eq!(client.writer().len(), written, "nothing more was sent");
    drop(worker_side);
}

/// SPEC §10: the time a host callback takes counts. The worker's answer is
/// already in the pipe, but the callback outlived the deadline: the call
/// fails and no host response is sent.
#[cfg(unix)]
#[test]
fn a_blocking_host_callback_counts_in_the_deadline() {
    use quirl_lua_protocol::blocking::FrameReader;
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    // The "worker": once the eval request arrived, a host call and, at
    // once, the eval answer; then whatever the parent writes still.
    let worker = std::thread::spawn(move || {
        let mut requests = FrameReader::new(worker_stdin);
        requests.next_payload().unwrap().unwrap();
        requests.next_payload().unwrap().unwrap();
        worker_side.write_all(&host_call_frame()).unwrap();
        worker_side.write_all(&frame(EVAL_OK)).unwrap();
        let mut rest = Vec::new();
        while let Ok(Some(payload)) = requests.next_payload() {
            rest.extend(payload);
        }
        String::from_utf8_lossy(&rest).into_owned()
    });
    let mut client = ParentClient::new(reader, stdin_writer);
    client.call(init(20)).unwrap().unwrap();
    let error = client
        .call_with_host(eval(), |_| {
            // Outlive the 20 ms deadline.
            std::thread::sleep(Duration::from_millis(60));
            Ok(outcome("slow"))
        })
        .unwrap_err();
    assert_refused_as_timed_out(&error);
    assert_eq!(client.connection().state(), SessionState::Abandoned);
    drop(client); // closes the worker's stdin
    let written_after_the_call = worker.join().unwrap();
    assert!(
        !written_after_the_call.contains("host_response"),
        "{written_after_the_call}"
    );
}

/// The read deadline of the caller and the request's deadline, through
/// the one name `next_event_before(Instant)`: the earlier wins.
#[cfg(unix)]
#[test]
fn blocking_next_event_before_tells_a_read_deadline_from_the_request_deadline() {
    let (reader, mut worker_side) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(init(60_000)).unwrap().unwrap();
    client.request(eval()).unwrap();
    // A read deadline before the request's: io TimedOut, still usable.
    let read = client
        .next_event_before(Instant::now() + Duration::from_millis(10))
        .unwrap_err();
    assert!(read.is_timed_out());
    assert_eq!(read.kind(), ErrorKind::IoError);
    assert_eq!(client.connection().state(), SessionState::Busy);
    worker_side.write_all(&frame(EVAL_OK)).unwrap();
    let event = client
        .next_event_before(Instant::now() + Duration::from_secs(30))
        .unwrap();
    assert!(matches!(event, Some(ParentEvent::Response { id: 2, .. })));

    // A request deadline before the read deadline: deadline_passed.
    let (reader, mut worker_side) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(init(10)).unwrap().unwrap();
    client.request(eval()).unwrap();
    let passed = client
        .next_event_before(Instant::now() + Duration::from_secs(3600))
        .unwrap_err();
    assert_refused_as_timed_out(&passed);
    assert!(client.connection().must_kill());
}

/// A `Canceller` ends a call blocked on a silent worker from another
/// thread, at once (the request's deadline is a minute away).
#[cfg(unix)]
#[test]
fn a_canceller_ends_a_blocked_call_from_another_thread() {
    use quirl_lua_protocol::blocking::FrameReader;
    let (reader, mut worker_side) = io::pipe().unwrap();
    let (worker_stdin, stdin_writer) = io::pipe().unwrap();
    worker_side.write_all(&frame(INIT_OK)).unwrap();
    let mut client = ParentClient::new(reader, stdin_writer);
    let canceller = client.canceller().unwrap();
    client.call(init(60_000)).unwrap().unwrap();
    let host = canceller.clone();
    // The "worker" reads both requests, then the host thread cancels: the
    // client is (about to be) blocked waiting for the eval answer.
    let watcher = std::thread::spawn(move || {
        let mut requests = FrameReader::new(worker_stdin);
        requests.next_payload().unwrap().unwrap();
        let eval = requests.next_payload().unwrap().unwrap();
        host.cancel();
        eval
    });
    let error = client.call(eval()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
    assert!(error.is_cancelled());
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(client.connection().must_kill());
    assert!(canceller.is_cancelled());
    let eval_request = watcher.join().unwrap();
    assert!(String::from_utf8_lossy(&eval_request).contains("return 7"));
    // Final: the next call is refused before anything is written.
    assert!(client.call(eval()).unwrap_err().is_cancelled());
    drop(worker_side);
}

/// A cancellation before a call refuses its request: nothing is written.
#[cfg(unix)]
#[test]
fn a_cancelled_client_sends_nothing() {
    let mut client = ParentClient::new(&b""[..], Vec::new());
    let canceller = client.canceller().unwrap();
    canceller.cancel();
    canceller.cancel(); // idempotent
    let error = client.call(init(100)).unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    assert!(client.writer().is_empty());
    assert_eq!(client.connection().state(), SessionState::Abandoned);
}

// ---- the tokio adapter ----

#[cfg(feature = "tokio")]
mod async_adapter {
    use super::*;
    use quirl_lua_protocol::connection::HostCommand;
    use quirl_lua_protocol::records::OperationResult;
    use quirl_lua_protocol::tokio_io::{ParentClient, WorkerClient};
    use quirl_lua_protocol::{WorkerEvent, records::ShellError};

    /// An async worker that answers `eval` with what its one host call
    /// returned on stdout.
    async fn relay_worker(
        reader: impl ::tokio::io::AsyncRead + Unpin,
        writer: impl ::tokio::io::AsyncWrite + Unpin,
    ) {
        let mut worker = WorkerClient::new(reader, writer);
        while let Ok(Some(WorkerEvent::Request(request))) = worker.next_event().await {
            let answer = match request.operation {
                Operation::Initialize { .. } => OperationResult::Null,
                _ => {
                    let call = HostCommand {
                        command: "greet".into(),
                        deadline_ms: 100,
                        max_output_bytes: 64,
                    };
                    let Ok(Ok(outcome)) = worker.host_call(call).await else {
                        return;
                    };
                    OperationResult::Value(json!(outcome.stdout))
                }
            };
            if worker.respond(Ok(answer)).await.is_err() {
                return;
            }
        }
    }

    fn pair() -> (
        ParentClient<
            ::tokio::io::ReadHalf<::tokio::io::DuplexStream>,
            ::tokio::io::WriteHalf<::tokio::io::DuplexStream>,
        >,
        ::tokio::io::DuplexStream,
    ) {
        let (parent_end, worker_end) = ::tokio::io::duplex(4096);
        let (read, write) = ::tokio::io::split(parent_end);
        (ParentClient::new(read, write), worker_end)
    }

    /// The host callback is an async function; its answer reaches the guest.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_async_host_callback_is_answered() {
        let (mut parent, worker_end) = pair();
        let (read, write) = ::tokio::io::split(worker_end);
        let worker = ::tokio::spawn(relay_worker(read, write));
        parent.call(init(60_000)).await.unwrap().unwrap();
        let mut calls = Vec::new();
        let answer = parent
            .call_with_host(eval(), async |call: &HostCall| {
                ::tokio::task::yield_now().await;
                calls.push(call.command.clone());
                Ok(outcome(&format!("hello from {}", call.command)))
            })
            .await
            .unwrap();
        assert_eq!(
            answer,
            Ok(OperationResult::Value(json!("hello from greet")))
        );
        assert_eq!(calls, ["greet"]);
        assert_eq!(parent.connection().state(), SessionState::Ready);
        parent.close_writer().await.unwrap();
        worker.await.unwrap();
    }

    /// The deadline covers the async host callback: one that never
    /// finishes is dropped at the deadline, the connection abandoned.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_async_host_callback_that_outlives_the_deadline_abandons() {
        let (mut parent, worker_end) = pair();
        let (read, write) = ::tokio::io::split(worker_end);
        let worker = ::tokio::spawn(relay_worker(read, write));
        parent.call(init(30)).await.unwrap().unwrap();
        let error = parent
            .call_with_host(eval(), async |_: &HostCall| {
                std::future::pending::<Result<CommandOutcome, ShellError>>().await
            })
            .await
            .unwrap_err();
        assert_refused_as_timed_out(&error);
        assert_eq!(parent.connection().state(), SessionState::Abandoned);
        assert!(parent.connection().must_kill());
        assert_refused_as_timed_out(&parent.call(eval()).await.unwrap_err());
        drop(parent);
        worker.await.unwrap();
    }

    /// `call_with_host_before`: the request is due at the host's own
    /// deadline, here earlier than the policy's minute; a silent worker's
    /// call ends there, the connection abandoned.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_async_call_with_its_own_deadline_ends_there() {
        let (mut parent, mut worker_end) = pair();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(INIT_OK))
            .await
            .unwrap();
        parent.call(init(60_000)).await.unwrap().unwrap();
        let own = Instant::now() + Duration::from_millis(20);
        let error = parent
            .call_with_host_before(eval(), own, async |_: &HostCall| Ok(outcome("")))
            .await
            .unwrap_err();
        assert_refused_as_timed_out(&error);
        assert!(parent.connection().must_kill());

        // The deadline the connection keeps is the one given, later than
        // the policy's budget too.
        let (mut parent, mut worker_end) = pair();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(INIT_OK))
            .await
            .unwrap();
        parent.call(init(20)).await.unwrap().unwrap();
        let later = Instant::now() + Duration::from_secs(3600);
        parent.request_with_deadline(eval(), later).await.unwrap();
        assert_eq!(parent.connection().next_deadline(), Some(later));
    }

    /// A silent worker: `call` ends at the request deadline.
    #[::tokio::test(flavor = "current_thread")]
    async fn an_async_call_ends_at_the_request_deadline() {
        let (mut parent, mut worker_end) = pair();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(INIT_OK))
            .await
            .unwrap();
        parent.call(init(20)).await.unwrap().unwrap();
        let error = parent.call(eval()).await.unwrap_err();
        assert_refused_as_timed_out(&error);
        assert!(parent.connection().must_kill());
    }

    /// `next_event_before(Instant)`: the same name and the same outcomes as
    /// the blocking adapter's.
    #[::tokio::test(flavor = "current_thread")]
    async fn async_next_event_before_tells_a_read_deadline_from_the_request_deadline() {
        let (mut parent, mut worker_end) = pair();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(INIT_OK))
            .await
            .unwrap();
        parent.call(init(60_000)).await.unwrap().unwrap();
        parent.request(eval()).await.unwrap();
        let read = parent
            .next_event_before(Instant::now() + Duration::from_millis(10))
            .await
            .unwrap_err();
        assert_eq!(read.kind(), ErrorKind::IoError);
        assert!(read.is_timed_out());
        assert_eq!(parent.connection().state(), SessionState::Busy);
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(EVAL_OK))
            .await
            .unwrap();
        let event = parent
            .next_event_before(Instant::now() + Duration::from_secs(30))
            .await
            .unwrap();
        assert!(matches!(event, Some(ParentEvent::Response { id: 2, .. })));

        let (mut parent, mut worker_end) = pair();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &frame(INIT_OK))
            .await
            .unwrap();
        parent.call(init(10)).await.unwrap().unwrap();
        parent.request(eval()).await.unwrap();
        let passed = parent
            .next_event_before(Instant::now() + Duration::from_secs(3600))
            .await
            .unwrap_err();
        assert_refused_as_timed_out(&passed);
        assert_eq!(parent.connection().state(), SessionState::Abandoned);
    }

    /// `cancel` abandons the tokio client's connection.
    #[::tokio::test(flavor = "current_thread")]
    async fn async_cancel_abandons() {
        let (mut parent, _worker_end) = pair();
        parent.request(init(100)).await.unwrap();
        assert!(parent.cancel().is_cancelled());
        assert!(parent.connection().must_kill());
        assert!(parent.call(eval()).await.unwrap_err().is_cancelled());
    }
}
