//! The sans-IO connections of both roles (SPEC §3.1 chunking, §9.3 states,
//! §9.5 end of stream, §9.6 poisoning, §4.2/§15.10 respond-or-error), and
//! the caller-mistake rule: `invalid_use`, nothing written, not poisoned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::limits::{FRAME_BYTES_MAX, HOST_CALLS_PER_REQUEST_MAX};
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

fn policy(allow_process: bool) -> Policy {
    Policy::new(PolicySettings {
        allow_process,
        memory_limit_bytes: 1 << 20,
        instruction_limit: 1_000,
        wall_time_ms: 100,
    })
    .unwrap()
}

fn eval(source: &str) -> Operation {
    Operation::Eval {
        source: source.to_owned(),
    }
}

fn command(text: &str) -> HostCommand {
    HostCommand {
        command: text.to_owned(),
        deadline_ms: 100,
        max_output_bytes: 4,
    }
}

/// Both ends, bytes moved by hand.
struct Link {
    parent: ParentConnection,
    worker: WorkerConnection,
}

impl Link {
    fn new() -> Self {
        Self {
            parent: ParentConnection::new(),
            worker: WorkerConnection::new(),
        }
    }

    /// Parent → worker: move the bytes, return the worker's event.
    fn down(&mut self) -> Result<Option<WorkerEvent>, ProtocolError> {
        let bytes = self.parent.take_outgoing();
        assert!(!bytes.is_empty(), "the parent wrote nothing");
        self.worker.feed(&bytes).unwrap();
        self.worker.poll_event()
    }

    /// Worker → parent: move the bytes, return the parent's event.
    fn up(&mut self) -> Result<Option<ParentEvent>, ProtocolError> {
        let bytes = self.worker.take_outgoing();
        assert!(!bytes.is_empty(), "the worker wrote nothing");
        self.parent.feed(&bytes).unwrap();
        self.parent.poll_event()
    }

    fn ready(process: bool) -> Self {
        let mut link = Self::new();
        link.parent
            .request(Operation::initialize(policy(process), None, process))
            .unwrap();
        assert!(matches!(
            link.down().unwrap(),
            Some(WorkerEvent::Request(_))
        ));
        link.worker.respond(Ok(OperationResult::Null)).unwrap();
        assert!(matches!(
            link.up().unwrap(),
            Some(ParentEvent::Response {
                result: Ok(OperationResult::Null),
                ..
            })
        ));
        link
    }

    fn busy(process: bool) -> Self {
        let mut link = Self::ready(process);
        link.parent.request(eval("return 1")).unwrap();
        assert!(matches!(
            link.down().unwrap(),
            Some(WorkerEvent::Request(_))
        ));
        link
    }
}

fn assert_invalid_use(result: Result<impl std::fmt::Debug, ProtocolError>) {
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidUse, "{error}");
    assert!(error.is_invalid_use());
}

#[test]
fn a_whole_session_with_a_host_call_ends_cleanly_on_both_sides() {
    let mut link = Link::busy(true);
    assert_eq!(link.worker.host_call(command("echo hi")).unwrap(), 1);
    let Some(ParentEvent::HostCall(call)) = link.up().unwrap() else {
        panic!("host call expected");
    };
    assert_eq!((call.call_id, call.command.as_str()), (1, "echo hi"));
    link.parent
        .host_response(Ok(CommandOutcome {
            status: 0,
            stdout: Some("hi\n".into()),
            stderr: None,
        }))
        .unwrap();
    let Some(WorkerEvent::HostResponse(response)) = link.down().unwrap() else {
        panic!("host response expected");
    };
    assert_eq!(response.result.unwrap().stdout.as_deref(), Some("hi\n"));
    link.worker
        .respond(Ok(OperationResult::Value(json!("hi"))))
        .unwrap();
    let Some(ParentEvent::Response { id, result, .. }) = link.up().unwrap() else {
        panic!("response expected");
    };
    assert_eq!((id, result), (2, Ok(OperationResult::Value(json!("hi")))));
    assert_eq!(link.parent.state(), SessionState::Ready);
    assert_eq!(link.parent.next_request_id(), 3);
    // The parent closes stdin between requests; the worker exits, so the
    // parent sees its stream end between requests too: both clean.
    assert_eq!(link.worker.end_of_stream(), Ok(()));
    assert_eq!(link.parent.end_of_stream(), Ok(()));
    assert!(link.worker.is_ended() && link.parent.is_ended());
    assert_invalid_use(link.parent.request(eval("return 2")));
    assert_invalid_use(link.worker.feed(&[0]));
}

// SPEC §3.1-e
#[test]
fn frames_are_accepted_in_any_chunking() {
    let mut link = Link::ready(false);
    link.parent.request(eval("return 1")).unwrap();
    let request = link.parent.take_outgoing();
    // One byte at a time: nothing until the last byte.
    for (index, byte) in request.iter().enumerate() {
        link.worker.feed(std::slice::from_ref(byte)).unwrap();
        let event = link.worker.poll_event().unwrap();
        assert_eq!(
            event.is_some(),
            index + 1 == request.len(),
            "at byte {index}"
        );
        assert_eq!(link.worker.is_quiet(), index + 1 == request.len());
    }
    link.worker
        .respond(Ok(OperationResult::Value(json!(1))))
        .unwrap();
    // A response and the start of the next frame in one chunk: the rest is
    // kept, and judged when it completes.
    let mut bytes = link.worker.take_outgoing();
    let stray = frame_payload(
        br#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":1}}"#,
    )
    .unwrap();
    bytes.extend_from_slice(&stray[..6]);
    link.parent.feed(&bytes).unwrap();
    assert!(link.parent.poll_event().unwrap().is_some());
    assert!(link.parent.poll_event().unwrap().is_none());
    assert!(!link.parent.is_quiet());
    // Bytes while nothing is in flight are a violation (SPEC §9.3), found
    // before the next request is written.
    let error = link.parent.request(eval("return 2")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedFrame);
    assert!(link.parent.outgoing().is_empty());
    assert_eq!(link.parent.state(), SessionState::Poisoned);
}

#[test]
fn two_frames_in_one_chunk_are_delivered_in_order_up_to_the_violation() {
    let mut link = Link::busy(true);
    link.worker.host_call(command("echo")).unwrap();
    let mut bytes = link.worker.take_outgoing();
    // A worker that does not wait for its host response.
    bytes.extend(
        frame_payload(
            br#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":1}}"#,
        )
        .unwrap(),
    );
    link.parent.feed(&bytes).unwrap();
    assert!(matches!(
        link.parent.poll_event().unwrap(),
        Some(ParentEvent::HostCall(_))
    ));
    let error = link
        .parent
        .host_response(Err(ShellError::new(ErrorCode::InvalidCommand, "no")))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedFrame);
    assert!(
        link.parent.outgoing().is_empty(),
        "nothing is written after a violation"
    );
    assert_eq!(
        link.parent.poll_event().unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
}

// SPEC §9.1-b, §9.2-f: a second request in flight, or an outcome beyond the call's
// max_output_bytes, is refused before anything is written.
#[test]
fn parent_mistakes_write_nothing_and_do_not_poison() {
    let mut parent = ParentConnection::new();
    assert_invalid_use(parent.request(eval("return 1")));
    assert_invalid_use(parent.host_response(Ok(CommandOutcome {
        status: 0,
        stdout: None,
        stderr: None,
    })));
    assert_eq!(parent.state(), SessionState::AwaitingInitialize);
    assert!(parent.outgoing().is_empty());

    let mut link = Link::ready(false);
    assert_invalid_use(
        link.parent
            .request(Operation::initialize(policy(false), None, false)),
    );
    link.parent.request(eval("return 1")).unwrap();
    let written = link.parent.outgoing().len();
    assert_invalid_use(link.parent.request(eval("return 2")));
    assert_eq!(link.parent.outgoing().len(), written);
    assert_eq!(link.parent.state(), SessionState::Busy);
    assert!(link.parent.poison_cause().is_none());
    // Still healthy: the request in flight completes normally.
    assert!(matches!(
        link.down().unwrap(),
        Some(WorkerEvent::Request(_))
    ));
    link.worker
        .respond(Ok(OperationResult::Value(json!(1))))
        .unwrap();
    assert!(link.up().unwrap().is_some());

    // An outcome beyond the call's max_output_bytes is refused before encoding.
    let mut link = Link::busy(true);
    link.worker.host_call(command("cat")).unwrap();
    link.up().unwrap();
    assert_invalid_use(link.parent.host_response(Ok(CommandOutcome {
        status: 0,
        stdout: Some("too long".into()),
        stderr: None,
    })));
    assert_eq!(link.parent.state(), SessionState::HostCallPending);
    link.parent
        .host_response(Ok(CommandOutcome {
            status: 0,
            stdout: Some("ok".into()),
            stderr: None,
        }))
        .unwrap();
    assert!(matches!(
        link.down().unwrap(),
        Some(WorkerEvent::HostResponse(_))
    ));
}

#[test]
fn a_failed_initialize_leaves_the_parent_in_failed() {
    let mut link = Link::new();
    link.parent
        .request(Operation::initialize(policy(false), None, false))
        .unwrap();
    link.down().unwrap();
    link.worker
        .respond(Err(ShellError::new(ErrorCode::Lua, "no VM")))
        .unwrap();
    assert!(matches!(
        link.up().unwrap(),
        Some(ParentEvent::Response { result: Err(_), .. })
    ));
    assert_eq!(link.parent.state(), SessionState::Failed);
    assert_invalid_use(link.parent.request(eval("return 1")));
    assert_eq!(link.worker.state(), SessionState::Failed);
    assert_eq!(link.worker.end_of_stream(), Ok(()));
}

#[test]
fn worker_mistakes_write_nothing_and_do_not_poison() {
    let mut worker = WorkerConnection::new();
    assert_invalid_use(worker.respond(Ok(OperationResult::Null)));
    assert_invalid_use(worker.respond_or_error(Ok(OperationResult::Null)));
    assert_invalid_use(worker.host_call(command("echo")));
    assert!(worker.outgoing().is_empty());
    assert_eq!(worker.state(), SessionState::AwaitingInitialize);

    // Host calls need process access; a wrong result kind is refused.
    let mut link = Link::busy(false);
    assert_invalid_use(link.worker.host_call(command("echo")));
    assert_invalid_use(link.worker.respond(Ok(OperationResult::TestCount(1))));
    assert!(link.worker.outgoing().is_empty());
    assert_eq!(link.worker.state(), SessionState::Busy);

    // While a host call is pending, neither a response nor another call.
    let mut link = Link::busy(true);
    link.worker.host_call(command("echo")).unwrap();
    let written = link.worker.outgoing().len();
    assert_invalid_use(link.worker.respond(Ok(OperationResult::Value(json!(1)))));
    assert_invalid_use(link.worker.host_call(command("echo")));
    assert_eq!(link.worker.outgoing().len(), written);
    assert!(link.worker.poison_cause().is_none());
}

#[test]
fn the_host_call_budget_is_a_caller_limit() {
    let mut link = Link::busy(true);
    for call in 1..=HOST_CALLS_PER_REQUEST_MAX {
        assert_eq!(link.worker.host_call(command("true")).unwrap(), call);
        link.up().unwrap();
        link.parent
            .host_response(Err(ShellError::new(ErrorCode::InvalidCommand, "no")))
            .unwrap();
        link.down().unwrap();
    }
    assert_invalid_use(link.worker.host_call(command("true")));
    assert_eq!(link.worker.state(), SessionState::Busy);
}

// SPEC §4.2-a: the refusal is local; the worker answers with an error instead.
#[test]
fn an_oversized_result_is_answered_with_a_resource_limit_error() {
    let mut link = Link::busy(false);
    let huge = Value::String("x".repeat(FRAME_BYTES_MAX));
    // `respond` refuses it without writing; the request stays in flight.
    let error = link
        .worker
        .respond(Ok(OperationResult::Value(huge.clone())))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OversizedFrame);
    assert!(link.worker.outgoing().is_empty());
    assert_eq!(link.worker.state(), SessionState::Busy);
    // `respond_or_error` falls back to an error record (DESIGN §15.10).
    let responded = link
        .worker
        .respond_or_error(Ok(OperationResult::Value(huge)))
        .unwrap();
    let Responded::WithError { reason } = responded else {
        panic!("a fallback was due");
    };
    assert_eq!(reason.kind(), ErrorKind::OversizedFrame);
    let Some(ParentEvent::Response {
        result: Err(record),
        ..
    }) = link.up().unwrap()
    else {
        panic!("error response expected");
    };
    assert_eq!(record.code, ErrorCode::ResourceLimit);
    assert!(
        record
            .context
            .iter()
            .any(|line| line.contains("oversized_frame"))
    );
    assert_eq!(link.worker.state(), SessionState::Ready);
}

#[test]
fn a_result_that_breaks_the_operations_rules_is_answered_with_a_validation_error() {
    let mut link = Link::ready(false);
    link.parent
        .request(Operation::Complete {
            command: "git".into(),
            context: json!({}),
        })
        .unwrap();
    link.down().unwrap();
    // A completion result must be an array (SPEC §7.2).
    let responded = link
        .worker
        .respond_json_or_error(Ok(json!({"not": "an array"})))
        .unwrap();
    assert!(matches!(responded, Responded::WithError { .. }));
    let Some(ParentEvent::Response {
        result: Err(record),
        ..
    }) = link.up().unwrap()
    else {
        panic!("error response expected");
    };
    assert_eq!(record.code, ErrorCode::Validation);

    // A typed result of the wrong kind, and an error record out of bounds.
    link.parent.request(eval("return 1")).unwrap();
    link.down().unwrap();
    let responded = link
        .worker
        .respond_or_error(Ok(OperationResult::TestCount(3)))
        .unwrap();
    assert!(
        matches!(responded, Responded::WithError { reason } if reason.kind() == ErrorKind::WrongType)
    );
    link.up().unwrap();
    link.parent.request(eval("return 1")).unwrap();
    link.down().unwrap();
    let mut record = ShellError::new(ErrorCode::Lua, "boom");
    record.context = vec!["c".to_owned(); 1000];
    let responded = link.worker.respond_or_error(Err(record)).unwrap();
    assert!(
        matches!(responded, Responded::WithError { reason } if reason.kind() == ErrorKind::ErrorRecordBounds)
    );
    let Some(ParentEvent::Response {
        result: Err(record),
        ..
    }) = link.up().unwrap()
    else {
        panic!("error response expected");
    };
    assert_eq!(record.code, ErrorCode::Validation);
    // And a result that fits goes as given.
    link.parent.request(eval("return 1")).unwrap();
    link.down().unwrap();
    assert_eq!(
        link.worker
            .respond_or_error(Ok(OperationResult::Value(json!(1))))
            .unwrap(),
        Responded::AsGiven
    );
}

#[test]
fn end_of_stream_follows_the_role_and_the_state() {
    // Worker: clean before initialize and between requests.
    let mut worker = WorkerConnection::new();
    assert_eq!(worker.end_of_stream(), Ok(()));
    let mut link = Link::ready(false);
    assert_eq!(link.worker.end_of_stream(), Ok(()));
    // Worker: a violation mid-request and while a host call is pending.
    let mut link = Link::busy(true);
    assert_eq!(
        link.worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::UnexpectedEnd
    );
    assert_eq!(link.worker.state(), SessionState::Poisoned);
    let mut link = Link::busy(true);
    link.worker.host_call(command("echo")).unwrap();
    assert_eq!(
        link.worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::UnexpectedEnd
    );
    // Parent: the worker quit mid-request.
    let mut link = Link::busy(false);
    let error = link.parent.end_of_stream().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedEnd);
    // SPEC §11.3: a worker that crashed mid-request is `lua` to callers
    // (the sub-kind's table code, §11.2, stays `io`).
    assert_eq!(error.code(), ErrorCode::Lua);
    assert_eq!(error.kind().code(), ErrorCode::Io);
    assert_eq!(link.parent.state(), SessionState::Poisoned);
    // Inside a frame: truncation, in every state.
    let mut link = Link::ready(false);
    link.parent.feed(&[0, 0]).unwrap();
    assert!(link.parent.poll_event().unwrap().is_none());
    assert_eq!(
        link.parent.end_of_stream().unwrap_err().kind(),
        ErrorKind::TruncatedHeader
    );
    let mut worker = WorkerConnection::new();
    worker.feed(&[0, 0, 0, 9, b'{']).unwrap();
    assert!(worker.poll_event().unwrap().is_none());
    assert_eq!(
        worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::TruncatedFrame
    );
    assert_eq!(
        worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
}

#[test]
fn end_of_stream_with_unpolled_bytes_is_a_caller_mistake() {
    let mut link = Link::new();
    link.parent
        .request(Operation::initialize(policy(false), None, false))
        .unwrap();
    link.worker.feed(&link.parent.take_outgoing()).unwrap();
    assert_invalid_use(link.worker.end_of_stream());
    assert!(!link.worker.is_ended());
    // Polling first delivers the request; then the end is mid-request.
    assert!(link.worker.poll_event().unwrap().is_some());
    assert_eq!(
        link.worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::UnexpectedEnd
    );
}

#[test]
fn framing_and_decoding_violations_poison_for_good() {
    let mut worker = WorkerConnection::new();
    worker.feed(&[0, 0, 0, 0]).unwrap();
    assert_eq!(
        worker.poll_event().unwrap_err().kind(),
        ErrorKind::EmptyFrame
    );
    assert_eq!(worker.state(), SessionState::Poisoned);
    assert_eq!(
        worker.poison_cause().map(ProtocolError::kind),
        Some(ErrorKind::EmptyFrame)
    );
    assert_eq!(
        worker.poll_event().unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
    assert_eq!(
        worker
            .respond(Ok(OperationResult::Null))
            .unwrap_err()
            .kind(),
        ErrorKind::SessionPoisoned
    );

    let mut link = Link::busy(false);
    link.parent
        .feed(&frame_payload(b"{\"kind\":\"response\"}").unwrap())
        .unwrap();
    assert_eq!(
        link.parent.poll_event().unwrap_err().kind(),
        ErrorKind::MissingField
    );
    assert_eq!(
        link.parent.request(eval("return 1")).unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
}

#[test]
fn outgoing_bytes_survive_partial_writes() {
    let mut link = Link::ready(false);
    link.parent.request(eval("return 1")).unwrap();
    let total = link.parent.outgoing().to_vec();
    let mut written = Vec::new();
    while !link.parent.outgoing().is_empty() {
        let chunk = link.parent.outgoing()[..3.min(link.parent.outgoing().len())].to_vec();
        written.extend_from_slice(&chunk);
        link.parent.consume_outgoing(chunk.len());
    }
    assert_eq!(written, total);
    link.worker.feed(&written).unwrap();
    assert!(link.worker.poll_event().unwrap().is_some());
}

/// The bytes of one frame: its length prefix (`length`, whatever the payload
/// is) and `payload`.
fn framed_as(length: u32, payload: &[u8]) -> Vec<u8> {
    [&length.to_be_bytes()[..], payload].concat()
}

// SPEC §4.3-a, §4.3-e: a receiver applies its rules in order. The length is
// judged before any payload byte is looked at; a stream that ends inside a
// payload is a truncation, never a JSON error of the part that arrived; and a
// frame is decoded and judged whole before the next one is read, so a valid
// request behind a bad frame is never delivered.
#[test]
fn receiver_rules_apply_in_order() {
    // Rule 1 before rule 4: the header decides, the payload is never decoded.
    for (length, kind) in [
        (0, ErrorKind::EmptyFrame),
        (FRAME_BYTES_MAX as u32 + 1, ErrorKind::OversizedFrame),
    ] {
        let mut worker = WorkerConnection::new();
        worker.feed(&framed_as(length, b"not json")).unwrap();
        assert_eq!(worker.poll_event().unwrap_err().kind(), kind);
    }
    // Rule 3 before rule 4: nine bytes promised, eight broken ones sent.
    let mut worker = WorkerConnection::new();
    worker.feed(&framed_as(9, br#"{"kind":"#)).unwrap();
    assert!(worker.poll_event().unwrap().is_none());
    assert_eq!(
        worker.end_of_stream().unwrap_err().kind(),
        ErrorKind::TruncatedFrame
    );
    // Rule 4, whole frame by frame: a bad frame, then a valid initialize in
    // the same read. The first is judged before the second is interpreted.
    let initialize = encode_parent_frame(&ParentFrame::Request {
        request: Request {
            id: 1,
            operation: Operation::initialize(policy(false), None, false),
        },
    })
    .unwrap();
    let mut worker = WorkerConnection::new();
    worker
        .feed(&[framed_as(1, b"x"), frame_payload(&initialize).unwrap()].concat())
        .unwrap();
    assert_eq!(
        worker.poll_event().unwrap_err().kind(),
        ErrorKind::MalformedJson
    );
    assert_eq!(
        worker.poll_event().unwrap_err().kind(),
        ErrorKind::SessionPoisoned
    );
}
