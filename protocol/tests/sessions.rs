#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §9.2–§9.4: the session state machines of both roles.

use quirl_lua_protocol::limits::HOST_OUTPUT_BYTES_MAX;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

fn request(id: u64, operation: Operation) -> ParentFrame {
    ParentFrame::Request {
        request: Request { id, operation },
    }
}

fn init(id: u64, process_enabled: bool) -> ParentFrame {
    request(
        id,
        Operation::initialize(Policy::quirl_script_profile(), None, process_enabled),
    )
}

fn eval(id: u64) -> ParentFrame {
    request(
        id,
        Operation::Eval {
            source: "return 1".into(),
        },
    )
}

fn response(id: u64, result: Value) -> WorkerFrame {
    WorkerFrame::Response {
        response: Response::success(id, result),
    }
}

fn call(request_id: u64, call_id: u32) -> WorkerFrame {
    WorkerFrame::HostCall {
        call: HostCall {
            request_id,
            call_id,
            command: "true".into(),
            deadline_ms: 10,
            max_output_bytes: 10,
        },
    }
}

fn host_response(request_id: u64, call_id: u32) -> ParentFrame {
    ParentFrame::HostResponse {
        response: HostResponse {
            request_id,
            call_id,
            result: Ok(CommandOutcome {
                status: 0,
                stdout: Some(String::new()),
                stderr: None,
            }),
        },
    }
}

/// Both roles observe the same frames in the same order.
struct Pair {
    parent: ParentSession,
    worker: WorkerSession,
}

impl Pair {
    fn new() -> Self {
        Self {
            parent: ParentSession::new(),
            worker: WorkerSession::new(),
        }
    }

    /// Parent sends `frame`; the worker receives it. Returns the worker's verdict.
    fn down(&mut self, frame: &ParentFrame) -> Result<(), ProtocolError> {
        let sent = self.parent.send(frame);
        let received = self.worker.receive(frame);
        assert_eq!(
            sent.as_ref().err().map(ProtocolError::kind),
            received.as_ref().err().map(ProtocolError::kind)
        );
        received
    }

    /// Worker sends `frame`; the parent receives it.
    fn up(&mut self, frame: &WorkerFrame) -> Result<(), ProtocolError> {
        let sent = self.worker.send(frame);
        let received = self.parent.receive(frame.clone());
        assert_eq!(
            sent.as_ref().err().map(ProtocolError::kind),
            received.as_ref().err().map(ProtocolError::kind)
        );
        received.map(drop)
    }

    fn ready() -> Self {
        let mut pair = Self::new();
        pair.down(&init(1, true)).unwrap();
        pair.up(&response(1, Value::Null)).unwrap();
        pair
    }

    fn states(&self) -> (SessionState, SessionState) {
        (self.parent.state(), self.worker.state())
    }
}

fn assert_violation(result: Result<(), ProtocolError>, kind: ErrorKind, pair: &mut Pair) {
    assert_eq!(result.unwrap_err().kind(), kind);
    assert_eq!(
        pair.states(),
        (SessionState::Poisoned, SessionState::Poisoned)
    );
    // Sticky: whatever comes next is refused as session_poisoned, on both sides.
    assert_eq!(
        pair.parent.send(&eval(1000)).unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.worker.receive(&eval(1000)).unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.worker.send(&response(1, json!(1))).unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.parent
            .receive(response(1, json!(1)))
            .unwrap_err()
            .kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.worker.respond(Ok(Value::Null)).unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.parent
            .request(Operation::Eval {
                source: String::new()
            })
            .unwrap_err()
            .kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        pair.parent.receive_payload(b"{}").unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert!(pair.parent.poison_cause().is_some() && pair.worker.poison_cause().is_some());
}

#[test]
fn happy_path_walks_every_legal_transition() {
    let mut pair = Pair::new();
    assert_eq!(
        pair.states(),
        (
            SessionState::AwaitingInitialize,
            SessionState::AwaitingInitialize
        )
    );
    pair.down(&init(1, true)).unwrap();
    assert_eq!(
        pair.states(),
        (SessionState::Initializing, SessionState::Initializing)
    );
    pair.up(&response(1, Value::Null)).unwrap();
    assert_eq!(pair.states(), (SessionState::Ready, SessionState::Ready));
    pair.down(&eval(5)).unwrap();
    assert_eq!(pair.states(), (SessionState::Busy, SessionState::Busy));
    for call_id in 1..=HOST_CALLS_PER_REQUEST_MAX {
        pair.up(&call(5, call_id)).unwrap();
        assert_eq!(
            pair.states(),
            (SessionState::HostCallPending, SessionState::HostCallPending)
        );
        pair.down(&host_response(5, call_id)).unwrap();
        assert_eq!(pair.states(), (SessionState::Busy, SessionState::Busy));
    }
    pair.up(&WorkerFrame::Response {
        response: Response::failure(5, ShellError::new(ErrorCode::Lua, "x")),
    })
    .unwrap();
    assert_eq!(pair.states(), (SessionState::Ready, SessionState::Ready));
    pair.down(&eval(6)).unwrap();
    pair.up(&response(6, json!(42))).unwrap();
    assert_eq!(pair.states(), (SessionState::Ready, SessionState::Ready));
}

#[test]
fn rejects_request_before_initialize() {
    let mut pair = Pair::new();
    let result = pair.down(&eval(1));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

#[test]
fn rejects_second_initialize() {
    let mut pair = Pair::ready();
    let result = pair.down(&init(2, true));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

#[test]
fn rejects_request_after_failed_initialize() {
    let mut pair = Pair::new();
    pair.down(&init(1, true)).unwrap();
    pair.up(&WorkerFrame::Response {
        response: Response::failure(1, ShellError::new(ErrorCode::Lua, "no vm")),
    })
    .unwrap();
    assert_eq!(pair.states(), (SessionState::Failed, SessionState::Failed));
    let result = pair.down(&eval(2));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

// SPEC §9.1-a
#[test]
fn rejects_request_ids_that_do_not_increase() {
    for id in [1, 0] {
        let mut pair = Pair::ready();
        let result = pair.down(&eval(id));
        assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
    }
    let mut pair = Pair::ready();
    pair.down(&eval(u64::MAX)).unwrap();
    pair.up(&response(u64::MAX, json!(1))).unwrap();
    let result = pair.down(&eval(u64::MAX));
    assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
}

// SPEC §9.1-b: the parent session refuses to send a second request in flight.
#[test]
fn rejects_second_request_in_flight() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    let result = pair.down(&eval(3));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

#[test]
fn rejects_request_while_host_call_pending() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    pair.up(&call(2, 1)).unwrap();
    let result = pair.down(&eval(3));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

#[test]
fn rejects_response_while_nothing_in_flight() {
    let mut pair = Pair::ready();
    let result = pair.up(&response(1, json!(1)));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

// SPEC §9.1-c
#[test]
fn rejects_response_with_another_id() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    let result = pair.up(&response(3, json!(1)));
    assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
}

// SPEC §9.2-c
#[test]
fn rejects_response_while_host_call_pending() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    pair.up(&call(2, 1)).unwrap();
    let result = pair.up(&response(2, json!(1)));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

// SPEC §9.2-a
#[test]
fn rejects_host_call_for_another_request() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    let result = pair.up(&call(1, 1));
    assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
}

#[test]
fn rejects_host_call_ids_out_of_order() {
    for call_id in [2, 3] {
        let mut pair = Pair::ready();
        pair.down(&eval(2)).unwrap();
        let result = pair.up(&call(2, call_id));
        assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
    }
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    pair.up(&call(2, 1)).unwrap();
    pair.down(&host_response(2, 1)).unwrap();
    let result = pair.up(&call(2, 1));
    assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
}

#[test]
fn call_ids_restart_at_one_for_each_request() {
    let mut pair = Pair::ready();
    for id in 2..4 {
        pair.down(&eval(id)).unwrap();
        pair.up(&call(id, 1)).unwrap();
        pair.down(&host_response(id, 1)).unwrap();
        pair.up(&response(id, json!(null))).unwrap();
    }
}

#[test]
fn rejects_seventeenth_host_call() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    for call_id in 1..=16 {
        pair.up(&call(2, call_id)).unwrap();
        pair.down(&host_response(2, call_id)).unwrap();
    }
    // Whatever id it carries, the 17th call breaks the limit.
    let mut worker = pair.worker.clone();
    assert_eq!(
        worker.host_call("true", 1, 1).unwrap_err().kind(),
        ErrorKind::HostCallLimit
    );
    let result = pair.up(&call(2, 3));
    assert_violation(result, ErrorKind::HostCallLimit, &mut pair);
}

// SPEC §7.1-a, §7.1-b: the worker session refuses to send it, the parent session to receive it.
#[test]
fn rejects_host_call_when_process_access_is_disabled() {
    let mut pair = Pair::new();
    pair.down(&init(1, false)).unwrap();
    pair.up(&response(1, Value::Null)).unwrap();
    pair.down(&eval(2)).unwrap();
    let result = pair.up(&call(2, 1));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

// SPEC §9.2-b
#[test]
fn rejects_host_call_during_initialize() {
    let mut pair = Pair::new();
    pair.down(&init(1, true)).unwrap();
    let result = pair.up(&call(1, 1));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

#[test]
fn rejects_host_response_without_pending_call() {
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    let result = pair.down(&host_response(2, 1));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
}

// SPEC §9.2-d
#[test]
fn rejects_host_response_with_wrong_ids() {
    for (request_id, call_id) in [(1, 1), (2, 2), (3, 1)] {
        let mut pair = Pair::ready();
        pair.down(&eval(2)).unwrap();
        pair.up(&call(2, 1)).unwrap();
        let result = pair.down(&host_response(request_id, call_id));
        assert_violation(result, ErrorKind::IdentityMismatch, &mut pair);
    }
}

#[test]
fn decode_errors_poison_the_receiving_session() {
    let mut worker = WorkerSession::new();
    assert_eq!(
        worker.receive_payload(b"{} ").unwrap_err().kind(),
        ErrorKind::MissingTag
    );
    assert_eq!(worker.state(), SessionState::Poisoned);
    assert_eq!(
        worker.receive_payload(b"{}").unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    let mut parent = ParentSession::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    assert_eq!(
        parent.receive_payload(b"[]").unwrap_err().kind(),
        ErrorKind::NotAnObject
    );
    assert_eq!(parent.state(), SessionState::Poisoned);
}

#[test]
fn parent_revalidates_results_per_operation() {
    let mut parent = ParentSession::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    let event = parent.receive(response(1, Value::Null)).unwrap();
    assert_eq!(
        event,
        ParentEvent::Response {
            id: 1,
            operation: OperationKind::Initialize,
            result: Ok(OperationResult::Null)
        }
    );
    let (id, _) = parent
        .request(Operation::Test {
            source: "x".into(),
            source_name: "t".into(),
        })
        .unwrap();
    let event = parent.receive(response(id, json!(3))).unwrap();
    assert_eq!(
        event,
        ParentEvent::Response {
            id,
            operation: OperationKind::Test,
            result: Ok(OperationResult::TestCount(3))
        }
    );
    let (id, _) = parent
        .request(Operation::Test {
            source: "x".into(),
            source_name: "t".into(),
        })
        .unwrap();
    let error = parent.receive(response(id, json!("three"))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WrongType);
    assert_eq!(parent.state(), SessionState::Poisoned);
}

#[test]
fn worker_refuses_to_send_a_bad_result_but_stays_usable() {
    let mut worker = WorkerSession::new();
    worker.receive(&init(1, false)).unwrap();
    worker.respond(Ok(Value::Null)).unwrap();
    worker
        .receive(&request(
            2,
            Operation::Run {
                source: "x".into(),
                source_name: "r".into(),
                context: ExecutionContext {
                    arguments: vec![],
                    environment: Default::default(),
                    working_directory: "/".into(),
                    input: ExecutionInput::None,
                    output: OutputTarget::Value,
                    declared_effects: ExecutionEffects::default(),
                },
            },
        ))
        .unwrap();
    assert_eq!(
        worker.respond(Ok(json!({"zz": 0}))).unwrap_err().kind(),
        ErrorKind::UnknownField
    );
    assert_eq!(worker.state(), SessionState::Busy);
    let huge = "x".repeat(FRAME_BYTES_MAX);
    worker.receive(&eval(3)).unwrap_err(); // still busy with 2: a violation on receipt
    let mut worker = WorkerSession::new();
    worker.receive(&init(1, false)).unwrap();
    worker.respond(Ok(Value::Null)).unwrap();
    worker.receive(&eval(2)).unwrap();
    assert_eq!(
        worker.respond(Ok(Value::String(huge))).unwrap_err().kind(),
        ErrorKind::OversizedFrame
    );
    assert_eq!(worker.state(), SessionState::Busy);
    let bytes = worker
        .respond(Err(ShellError::new(
            ErrorCode::ResourceLimit,
            "result too large",
        )))
        .unwrap();
    assert_eq!(worker.state(), SessionState::Ready);
    assert!(matches!(
        decode_worker_frame(&bytes[4..]).unwrap(),
        WorkerFrame::Response { .. }
    ));
}

#[test]
fn convenience_methods_fill_in_ids() {
    let mut parent = ParentSession::new();
    let mut worker = WorkerSession::new();
    let (id, bytes) = parent
        .request(Operation::initialize(
            Policy::quirl_script_profile(),
            None,
            true,
        ))
        .unwrap();
    assert_eq!(id, 1);
    worker.receive_payload(&bytes[4..]).unwrap();
    parent
        .receive_payload(&worker.respond(Ok(Value::Null)).unwrap()[4..])
        .unwrap();
    let (id, bytes) = parent
        .request(Operation::Eval { source: "x".into() })
        .unwrap();
    assert_eq!((id, parent.next_request_id()), (2, 3));
    worker.receive_payload(&bytes[4..]).unwrap();
    let call_bytes = worker.host_call("echo hi", 50, 1024).unwrap();
    let ParentEvent::HostCall(call) = parent.receive_payload(&call_bytes[4..]).unwrap() else {
        panic!()
    };
    assert_eq!((call.request_id, call.call_id), (2, 1));
    let answer = parent
        .host_response(Err(ShellError::new(ErrorCode::ProcessSpawn, "no")))
        .unwrap();
    worker.receive_payload(&answer[4..]).unwrap();
    let done = worker.respond(Ok(json!([1]))).unwrap();
    let event = parent.receive_payload(&done[4..]).unwrap();
    assert_eq!(
        event,
        ParentEvent::Response {
            id: 2,
            operation: OperationKind::Eval,
            result: Ok(OperationResult::Value(json!([1])))
        }
    );
    assert_eq!(
        (parent.state(), worker.state()),
        (SessionState::Ready, SessionState::Ready)
    );
}

fn init_with(id: u64, policy: Policy, process_enabled: bool) -> ParentFrame {
    request(id, Operation::initialize(policy, None, process_enabled))
}

// SPEC §7.1-a, §7.1-b
#[test]
fn rejects_host_call_when_the_policy_disallows_processes() {
    // `process_enabled` alone is not enough: the policy must allow processes
    // too, whatever the worker claims (Quirl's parent checks neither).
    let mut pair = Pair::new();
    pair.down(&init_with(1, Policy::quirl_config_profile(), true))
        .unwrap();
    pair.up(&response(1, Value::Null)).unwrap();
    pair.down(&eval(2)).unwrap();
    let result = pair.up(&call(2, 1));
    assert_violation(result, ErrorKind::UnexpectedFrame, &mut pair);
    // Both flags set: the same call is accepted.
    let mut pair = Pair::new();
    let allowed = Policy::new(PolicySettings {
        allow_process: true,
        memory_limit_bytes: 1 << 20,
        instruction_limit: 1000,
        wall_time_ms: 100,
    })
    .unwrap();
    pair.down(&init_with(1, allowed, true)).unwrap();
    pair.up(&response(1, Value::Null)).unwrap();
    pair.down(&eval(2)).unwrap();
    pair.up(&call(2, 1)).unwrap();
}

#[test]
fn host_calls_allowed_reports_both_flags() {
    for (allow_process, process_enabled) in
        [(false, false), (false, true), (true, false), (true, true)]
    {
        let policy = Policy::new(PolicySettings {
            allow_process,
            memory_limit_bytes: 1 << 20,
            instruction_limit: 1000,
            wall_time_ms: 100,
        })
        .unwrap();
        let mut pair = Pair::new();
        pair.down(&init_with(1, policy, process_enabled)).unwrap();
        let expected = allow_process && process_enabled;
        assert_eq!(pair.parent.host_calls_allowed(), expected);
        assert_eq!(pair.worker.host_calls_allowed(), expected);
        assert_eq!(pair.worker.process_enabled(), process_enabled);
    }
}

fn outcome_response(call_id: u32, stdout: &str, stderr: Option<&str>) -> ParentFrame {
    ParentFrame::HostResponse {
        response: HostResponse {
            request_id: 2,
            call_id,
            result: Ok(CommandOutcome {
                status: 0,
                stdout: Some(stdout.to_owned()),
                stderr: stderr.map(str::to_owned),
            }),
        },
    }
}

// SPEC §9.2-f: U+FFFD counted as one captured byte.
#[test]
fn host_response_output_is_bounded_by_the_call() {
    // `call` asks for at most 10 bytes per stream.
    let mut pair = Pair::ready();
    pair.down(&eval(2)).unwrap();
    pair.up(&call(2, 1)).unwrap();
    pair.down(&outcome_response(1, &"o".repeat(10), Some(&"e".repeat(10))))
        .unwrap();
    // Lossy decoding turns one to three raw bytes into U+FFFD (3 bytes of
    // UTF-8): each counts as one captured byte.
    pair.up(&call(2, 2)).unwrap();
    pair.down(&outcome_response(2, &"\u{FFFD}".repeat(10), None))
        .unwrap();
    for (stdout, stderr) in [
        ("o".repeat(11), None),
        (String::new(), Some("e".repeat(11))),
        ("\u{FFFD}".repeat(10) + "x", None),
    ] {
        let mut pair = Pair::ready();
        pair.down(&eval(2)).unwrap();
        pair.up(&call(2, 1)).unwrap();
        let result = pair.down(&outcome_response(1, &stdout, stderr.as_deref()));
        assert_violation(result, ErrorKind::DomainBounds, &mut pair);
    }
}

#[test]
fn command_outcome_streams_never_exceed_the_host_output_limit() {
    let limit = usize::try_from(HOST_OUTPUT_BYTES_MAX).unwrap();
    let frame = |stdout: String| {
        let json = serde_json::json!({"kind": "host_response", "response": {"request_id": 1,
            "call_id": 1, "outcome": {"status": 0, "stdout": stdout, "stderr": null}}});
        serde_json::to_vec(&json).unwrap()
    };
    assert!(decode_parent_frame(&frame("x".repeat(limit))).is_ok());
    assert!(decode_parent_frame(&frame("x".repeat(limit - 1) + "\u{FFFD}")).is_ok());
    assert_eq!(
        decode_parent_frame(&frame("x".repeat(limit + 1)))
            .unwrap_err()
            .kind(),
        ErrorKind::DomainBounds
    );
    assert_eq!(
        CommandOutcome {
            status: 0,
            stdout: None,
            stderr: Some("x".repeat(limit) + "\u{FFFD}"),
        }
        .validate()
        .unwrap_err()
        .kind(),
        ErrorKind::DomainBounds
    );
    assert_eq!(CommandOutcome::captured_bytes("a\u{FFFD}é"), 4);
}
