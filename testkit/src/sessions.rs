//! Session targets: the parent and worker session machines driven by
//! fuzzer-chosen sequences of frames (received and sent, as records and as
//! bytes), checked step by step against an independent model of the
//! transition table (SPEC.md §9 and the crate's `session` docs).
//!
//! The records come from the protocol crate's `arbitrary::Arbitrary`
//! (feature `arbitrary`: any record within the protocol's bounds) and from
//! this kit's boundary-biased generator, the input choosing which.
//!
//! Properties: no panic; a frame is accepted exactly when the model
//! accepts it; a rejected frame reports a kind the model allows; every
//! violation poisons, and a poisoned session accepts and sends nothing
//! (`session_poisoned`) and never changes state again; a sender-side
//! encoding failure is not a violation (state unchanged, not poisoned).

use crate::generate::{self, Source};
use quirl_lua_protocol::records::{
    CommandOutcome, HostCall, HostResponse, Operation, OperationKind, OperationResult, ParentFrame,
    Policy, Request, Response, ShellError, WorkerFrame,
};
use quirl_lua_protocol::{
    ErrorKind, ParentEvent, ParentSession, ProtocolError, SessionState, WireFrame, WorkerSession,
    decode_parent_frame, decode_worker_frame,
};
use serde_json::Value;

const CALLS_MAX: u32 = 16;
const OUTPUT_MAX: u64 = 1024 * 1024;

/// The model's view of one session (shared by both roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitInit,
    Initializing {
        id: u64,
    },
    Ready,
    Busy {
        id: u64,
        kind: OperationKind,
        calls: u32,
    },
    Pending {
        id: u64,
        kind: OperationKind,
        call: u32,
        /// The pending call's `max_output_bytes`.
        max_output: u64,
    },
    Failed,
    Poisoned,
}

#[derive(Debug, Clone)]
struct Model {
    phase: Phase,
    last_id: Option<u64>,
    process_enabled: bool,
    /// `process_enabled` and the policy's `allow_process`.
    host_calls_allowed: bool,
}

/// What the model expects of one step.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Accepted; the model moved to its next phase.
    Accept,
    /// A violation: one of these kinds; the session is poisoned.
    Violation(Vec<ErrorKind>),
    /// A local sender failure (bad encoding or result shape): not a violation.
    LocalError,
}

impl Model {
    fn new() -> Self {
        Self {
            phase: Phase::AwaitInit,
            last_id: None,
            process_enabled: false,
            host_calls_allowed: false,
        }
    }

    fn state(&self) -> SessionState {
        match self.phase {
            Phase::AwaitInit => SessionState::AwaitingInitialize,
            Phase::Initializing { .. } => SessionState::Initializing,
            Phase::Ready => SessionState::Ready,
            Phase::Busy { .. } => SessionState::Busy,
            Phase::Pending { .. } => SessionState::HostCallPending,
            Phase::Failed => SessionState::Failed,
            Phase::Poisoned => SessionState::Poisoned,
        }
    }

    fn in_flight(&self) -> Option<(u64, OperationKind)> {
        match self.phase {
            Phase::Initializing { id } => Some((id, OperationKind::Initialize)),
            Phase::Busy { id, kind, .. } | Phase::Pending { id, kind, .. } => Some((id, kind)),
            _ => None,
        }
    }

    fn calls(&self) -> u32 {
        match self.phase {
            Phase::Busy { calls, .. } => calls,
            Phase::Pending { call, .. } => call,
            _ => 0,
        }
    }

    fn violation(&mut self, kinds: Vec<ErrorKind>) -> Verdict {
        self.phase = Phase::Poisoned;
        Verdict::Violation(kinds)
    }

    fn request(&mut self, request: &Request) -> Verdict {
        if self.phase == Phase::Poisoned {
            return Verdict::Violation(vec![ErrorKind::SessionPoisoned]);
        }
        let initialize = matches!(request.operation, Operation::Initialize { .. });
        let mut kinds = Vec::new();
        match self.phase {
            Phase::Failed
            | Phase::Initializing { .. }
            | Phase::Busy { .. }
            | Phase::Pending { .. } => kinds.push(ErrorKind::UnexpectedFrame),
            Phase::AwaitInit if !initialize => kinds.push(ErrorKind::UnexpectedFrame),
            Phase::Ready if initialize => kinds.push(ErrorKind::UnexpectedFrame),
            _ => {}
        }
        if self.last_id.is_some_and(|last| request.id <= last) {
            kinds.push(ErrorKind::IdentityMismatch);
        }
        if !kinds.is_empty() {
            return self.violation(kinds);
        }
        self.last_id = Some(request.id);
        if let Operation::Initialize {
            policy,
            process_enabled,
            ..
        } = request.operation
        {
            self.process_enabled = process_enabled;
            self.host_calls_allowed = process_enabled && policy.allow_process();
            self.phase = Phase::Initializing { id: request.id };
        } else {
            self.phase = Phase::Busy {
                id: request.id,
                kind: request.operation.kind(),
                calls: 0,
            };
        }
        Verdict::Accept
    }

    fn host_response(&mut self, response: &HostResponse) -> Verdict {
        match self.phase {
            Phase::Poisoned => Verdict::Violation(vec![ErrorKind::SessionPoisoned]),
            Phase::Pending {
                id,
                kind,
                call,
                max_output,
            } => {
                if response.request_id != id || response.call_id != call {
                    return self.violation(vec![ErrorKind::IdentityMismatch]);
                }
                if let Ok(outcome) = &response.result {
                    let over = |stream: &Option<String>| {
                        stream
                            .as_deref()
                            .is_some_and(|text| captured(text) > max_output)
                    };
                    if over(&outcome.stdout) || over(&outcome.stderr) {
                        return self.violation(vec![ErrorKind::DomainBounds]);
                    }
                }
                self.phase = Phase::Busy {
                    id,
                    kind,
                    calls: call,
                };
                Verdict::Accept
            }
            _ => self.violation(vec![ErrorKind::UnexpectedFrame]),
        }
    }

    /// A response; `shape_ok` says whether a success result fits the operation.
    /// Returns the verdict before any result-shape check (`None` = accepted so far).
    fn response_identity(&self, response: &Response) -> Option<Vec<ErrorKind>> {
        match self.phase {
            Phase::Poisoned => Some(vec![ErrorKind::SessionPoisoned]),
            Phase::Initializing { id } | Phase::Busy { id, .. } => {
                (response.id != id).then(|| vec![ErrorKind::IdentityMismatch])
            }
            _ => Some(vec![ErrorKind::UnexpectedFrame]),
        }
    }

    fn apply_response(&mut self, ok: bool) {
        self.phase = match self.phase {
            Phase::Initializing { .. } if !ok => Phase::Failed,
            _ => Phase::Ready,
        };
    }

    fn host_call(&mut self, call: &HostCall) -> Verdict {
        if self.phase == Phase::Poisoned {
            return Verdict::Violation(vec![ErrorKind::SessionPoisoned]);
        }
        let Phase::Busy { id, kind, calls } = self.phase else {
            return self.violation(vec![ErrorKind::UnexpectedFrame]);
        };
        let mut kinds = Vec::new();
        if !self.host_calls_allowed {
            kinds.push(ErrorKind::UnexpectedFrame);
        }
        if call.request_id != id || call.call_id != calls + 1 {
            kinds.push(ErrorKind::IdentityMismatch);
        }
        if calls >= CALLS_MAX {
            kinds.push(ErrorKind::HostCallLimit);
        }
        if !kinds.is_empty() {
            return self.violation(kinds);
        }
        self.phase = Phase::Pending {
            id,
            kind,
            call: call.call_id,
            max_output: call.max_output_bytes,
        };
        Verdict::Accept
    }
}

/// Raw bytes a captured stream stands for: U+FFFD (lossy decoding) counts as one.
fn captured(text: &str) -> u64 {
    text.chars()
        .map(|c| {
            if c == '\u{FFFD}' {
                1
            } else {
                c.len_utf8() as u64
            }
        })
        .sum()
}

fn terminal_control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// No terminal controls in any key or string (shallow values only).
fn terminal_safe(value: &Value) -> bool {
    match value {
        Value::String(text) => !text.chars().any(terminal_control),
        Value::Array(items) => items.iter().all(terminal_safe),
        Value::Object(map) => map
            .iter()
            .all(|(key, item)| !key.chars().any(terminal_control) && terminal_safe(item)),
        _ => true,
    }
}

/// Completion items: strings or `{value, display?, summary?, detail?}` of
/// strings; at most 1,000, 16 KiB each, 256 KiB together.
fn completion_fits(value: &Value) -> bool {
    let Some(items) = value.as_array() else {
        return false;
    };
    let mut total = 0;
    for item in items {
        let bytes = match item {
            Value::String(text) => text.len(),
            Value::Object(map)
                if map.get("value").is_some_and(Value::is_string)
                    && map.iter().all(|(key, item)| {
                        ["value", "display", "summary", "detail"].contains(&key.as_str())
                            && item.is_string()
                    }) =>
            {
                map.values().filter_map(Value::as_str).map(str::len).sum()
            }
            _ => return false,
        };
        if bytes > 16 * 1024 {
            return false;
        }
        total += bytes;
    }
    items.len() <= 1000 && total <= 256 * 1024
}

/// Whether a success result has the shape of `kind`'s result (for the
/// simple values the session targets send; independent of the crate).
fn result_fits(kind: OperationKind, value: &Value) -> bool {
    match kind {
        OperationKind::Initialize | OperationKind::Check => value.is_null(),
        OperationKind::Eval => true,
        OperationKind::Complete => completion_fits(value),
        OperationKind::Contribution => terminal_safe(value),
        OperationKind::Test => value.as_u64().is_some_and(|count| count >= 1),
        OperationKind::RenderPrompt => {
            value.is_null()
                || value.as_str().is_some_and(|text| {
                    text.len() <= 16 * 1024 && !text.chars().any(terminal_control)
                })
        }
        OperationKind::Event => value.as_array().is_some_and(Vec::is_empty),
        OperationKind::LoadConfig
        | OperationKind::LoadPlugin
        | OperationKind::Run
        | OperationKind::PluginCommand => false,
    }
}

#[allow(clippy::result_large_err)]
fn simple_result(src: &mut Source<'_>) -> Result<Value, ShellError> {
    match src.byte() % 8 {
        0 => Ok(Value::Null),
        1 => Ok(Value::from(5_u64)),
        2 => Ok(Value::from("text")),
        3 => Ok(Value::Array(Vec::new())),
        4 => Ok(serde_json::json!({})),
        5 => Ok(Value::from(-1)),
        _ => Err(error_record(src)),
    }
}

/// An error record: `Arbitrary`'s or the generator's.
fn error_record(src: &mut Source<'_>) -> ShellError {
    if src.flag()
        && let Some(error) = src.arbitrary()
    {
        return error;
    }
    generate::shell_error(src)
}

/// A command outcome: `Arbitrary`'s or the generator's.
fn command_outcome(src: &mut Source<'_>) -> CommandOutcome {
    if src.flag()
        && let Some(outcome) = src.arbitrary()
    {
        return outcome;
    }
    generate::command_outcome(src)
}

fn choose_id(src: &mut Source<'_>, model: &Model) -> u64 {
    let current = model.in_flight().map(|(id, _)| id);
    let last = model.last_id.unwrap_or(0);
    match src.byte() % 8 {
        0 | 1 => current.unwrap_or(last),
        2 | 3 => last.saturating_add(1),
        4 => last,
        5 => last.saturating_sub(1),
        6 => last.saturating_add(u64::from(src.byte())),
        _ => src.any_u64(),
    }
}

fn choose_call_id(src: &mut Source<'_>, model: &Model) -> u32 {
    let calls = model.calls();
    match src.byte() % 6 {
        0..=2 => calls.saturating_add(1),
        3 => calls,
        4 => 0,
        _ => src.any_u64() as u32,
    }
}

fn choose_operation(src: &mut Source<'_>) -> Operation {
    match src.byte() % 3 {
        0 => {
            let policy = if src.flag() {
                Policy::quirl_script_profile()
            } else {
                Policy::quirl_config_profile()
            };
            Operation::initialize(policy, None, !src.byte().is_multiple_of(4))
        }
        1 => generate::operation(src),
        _ => src.arbitrary().unwrap_or_else(|| generate::operation(src)),
    }
}

fn choose_request(src: &mut Source<'_>, model: &Model) -> Request {
    Request {
        id: choose_id(src, model),
        operation: choose_operation(src),
    }
}

fn choose_host_response(src: &mut Source<'_>, model: &Model) -> HostResponse {
    let request_id = choose_id(src, model);
    let call_id = match model.phase {
        Phase::Pending { call, .. } if !src.byte().is_multiple_of(4) => call,
        _ => (choose_call_id(src, model) % 17).max(1),
    };
    HostResponse {
        request_id,
        call_id,
        result: if src.flag() {
            Ok(command_outcome(src))
        } else {
            Err(error_record(src))
        },
    }
}

fn choose_host_call(src: &mut Source<'_>, model: &Model) -> HostCall {
    HostCall {
        request_id: choose_id(src, model),
        call_id: choose_call_id(src, model),
        command: src.text(6),
        deadline_ms: src.any_u64(),
        max_output_bytes: choose_output(src),
    }
}

fn choose_output(src: &mut Source<'_>) -> u64 {
    match src.byte() % 6 {
        0 => OUTPUT_MAX,
        1 => OUTPUT_MAX + 1,
        _ => u64::from(src.byte()),
    }
}

fn choose_response(src: &mut Source<'_>, model: &Model) -> Response {
    Response {
        id: choose_id(src, model),
        result: simple_result(src),
    }
}

/// Garbage or a corrupted valid payload.
fn garbage(src: &mut Source<'_>, valid: Vec<u8>) -> Vec<u8> {
    let mut bytes = valid;
    match src.byte() % 4 {
        0 => src.bytes(24),
        1 if !bytes.is_empty() => {
            let at = src.below(bytes.len());
            bytes[at] ^= src.byte().max(1);
            bytes
        }
        2 => {
            bytes.push(b' ');
            bytes
        }
        _ => {
            let cut = src.below(bytes.len().max(1));
            bytes.truncate(cut);
            bytes
        }
    }
}

/// Compare one step's outcome with the model's verdict.
fn check_outcome<T: std::fmt::Debug>(
    step: &str,
    verdict: &Verdict,
    outcome: &Result<T, ProtocolError>,
) {
    match (verdict, outcome) {
        (Verdict::Accept, Ok(_)) => {}
        (Verdict::Violation(kinds), Err(error)) => assert!(
            kinds.contains(&error.kind()),
            "{step}: expected one of {kinds:?}, got {error}"
        ),
        (Verdict::LocalError, Err(error)) => assert!(
            !matches!(
                error.kind(),
                ErrorKind::SessionPoisoned
                    | ErrorKind::UnexpectedFrame
                    | ErrorKind::IdentityMismatch
            ),
            "{step}: a local failure reported a session kind: {error}"
        ),
        (verdict, outcome) => panic!("{step}: model says {verdict:?}, session says {outcome:?}"),
    }
}

fn check_state(
    step: &str,
    model: &Model,
    state: SessionState,
    in_flight: Option<(u64, OperationKind)>,
    cause: Option<&ProtocolError>,
) {
    assert_eq!(state, model.state(), "{step}: state");
    if model.phase == Phase::Poisoned {
        assert!(cause.is_some(), "{step}: poisoned without a cause");
    } else {
        assert!(cause.is_none(), "{step}: a cause without poisoning");
        assert_eq!(in_flight, model.in_flight(), "{step}: in-flight request");
    }
}

// ----- worker session -----------------------------------------------------------

fn worker_receive(
    session: &mut WorkerSession,
    model: &mut Model,
    frame: &ParentFrame,
    bytes: bool,
) {
    let verdict = match frame {
        ParentFrame::Request { request } => model.request(request),
        ParentFrame::HostResponse { response } => model.host_response(response),
    };
    if bytes {
        let Ok(payload) = frame.encode() else {
            panic!("a generated parent frame failed to encode: {frame:?}");
        };
        let outcome = session.receive_payload(&payload);
        check_outcome("worker receive_payload", &verdict, &outcome);
        if let Ok(decoded) = outcome {
            assert_eq!(&decoded, frame);
        }
    } else {
        check_outcome("worker receive", &verdict, &session.receive(frame));
    }
}

fn worker_send(session: &mut WorkerSession, model: &mut Model, frame: &WorkerFrame) {
    let verdict = match frame {
        WorkerFrame::Response { response } => match model.response_identity(response) {
            Some(kinds) => {
                if !kinds.contains(&ErrorKind::SessionPoisoned) {
                    model.phase = Phase::Poisoned;
                }
                Verdict::Violation(kinds)
            }
            None => {
                let kind = model.in_flight().map(|(_, kind)| kind);
                match (&response.result, kind) {
                    (Ok(value), Some(kind)) if !result_fits(kind, value) => Verdict::LocalError,
                    _ => {
                        model.apply_response(response.result.is_ok());
                        Verdict::Accept
                    }
                }
            }
        },
        WorkerFrame::HostCall { call } => {
            let before = model.clone();
            let verdict = model.host_call(call);
            if verdict == Verdict::Accept && call.max_output_bytes > OUTPUT_MAX {
                *model = before;
                Verdict::LocalError
            } else {
                verdict
            }
        }
    };
    let outcome = session.send(frame);
    check_outcome("worker send", &verdict, &outcome);
    if let Ok(bytes) = outcome {
        let (length, payload) = bytes.split_at(4);
        assert_eq!(length, (payload.len() as u32).to_be_bytes());
        assert_eq!(decode_worker_frame(payload).ok().as_ref(), Some(frame));
    }
}

/// Target `worker_session`: a worker session driven through a sequence of
/// received parent frames and sent worker frames, against the model.
pub fn worker_session(data: &[u8]) {
    worker_session_trace(data);
}

/// [`worker_session`], returning the state after every step.
pub fn worker_session_trace(data: &[u8]) -> Vec<SessionState> {
    let mut trace = Vec::new();
    let mut src = Source::new(data);
    let mut session = WorkerSession::new();
    let mut model = Model::new();
    for _ in 0..64 {
        if src.is_empty() {
            break;
        }
        let action = src.byte() % 9;
        match action {
            0 | 1 => {
                let frame = ParentFrame::Request {
                    request: choose_request(&mut src, &model),
                };
                worker_receive(&mut session, &mut model, &frame, action == 1);
            }
            2 | 3 => {
                let frame = ParentFrame::HostResponse {
                    response: choose_host_response(&mut src, &model),
                };
                worker_receive(&mut session, &mut model, &frame, action == 3);
            }
            4 => {
                // Bytes that may not even decode: a decode error poisons.
                let valid = ParentFrame::Request {
                    request: choose_request(&mut src, &model),
                }
                .encode()
                .unwrap_or_default();
                let payload = garbage(&mut src, valid);
                match decode_parent_frame(&payload) {
                    Ok(frame) => worker_receive(&mut session, &mut model, &frame, true),
                    Err(error) => {
                        let verdict = if model.phase == Phase::Poisoned {
                            Verdict::Violation(vec![ErrorKind::SessionPoisoned])
                        } else {
                            model.violation(vec![error.kind()])
                        };
                        let outcome = session.receive_payload(&payload);
                        check_outcome("worker receive garbage", &verdict, &outcome);
                    }
                }
            }
            5 => {
                let frame = WorkerFrame::Response {
                    response: choose_response(&mut src, &model),
                };
                worker_send(&mut session, &mut model, &frame);
            }
            6 => {
                // respond(): the session fills in the in-flight id.
                let result = simple_result(&mut src);
                match model.in_flight() {
                    Some((id, _)) if model.phase != Phase::Poisoned => {
                        let frame = WorkerFrame::Response {
                            response: Response {
                                id,
                                result: result.clone(),
                            },
                        };
                        let mut expected = session.clone();
                        let mut expected_model = model.clone();
                        worker_send(&mut expected, &mut expected_model, &frame);
                        let outcome = session.respond(result);
                        assert_eq!(
                            session.state(),
                            expected.state(),
                            "respond() differs from send()"
                        );
                        if let Ok(bytes) = &outcome {
                            assert_eq!(
                                decode_worker_frame(&bytes[4..]).ok().as_ref(),
                                Some(&frame)
                            );
                        }
                        model = expected_model;
                    }
                    _ => {
                        let verdict = if model.phase == Phase::Poisoned {
                            Verdict::Violation(vec![ErrorKind::SessionPoisoned])
                        } else {
                            model.violation(vec![ErrorKind::UnexpectedFrame])
                        };
                        check_outcome("worker respond", &verdict, &session.respond(result));
                    }
                }
            }
            7 => {
                let frame = WorkerFrame::HostCall {
                    call: choose_host_call(&mut src, &model),
                };
                worker_send(&mut session, &mut model, &frame);
            }
            _ => {
                // host_call(): the session fills in both ids.
                let command = src.text(6);
                let deadline = src.any_u64();
                let output = choose_output(&mut src);
                match model.in_flight() {
                    Some((id, _)) if model.phase != Phase::Poisoned => {
                        let call_id = model.calls().saturating_add(1);
                        let frame = WorkerFrame::HostCall {
                            call: HostCall {
                                request_id: id,
                                call_id,
                                command: command.clone(),
                                deadline_ms: deadline,
                                max_output_bytes: output,
                            },
                        };
                        let mut expected = session.clone();
                        let mut expected_model = model.clone();
                        worker_send(&mut expected, &mut expected_model, &frame);
                        let outcome = session.host_call(command, deadline, output);
                        let wanted = expected.state();
                        assert_eq!(session.state(), wanted, "host_call() differs from send()");
                        if outcome.is_err() {
                            assert_eq!(expected_model.state(), wanted);
                        }
                        model = expected_model;
                    }
                    _ => {
                        let verdict = if model.phase == Phase::Poisoned {
                            Verdict::Violation(vec![ErrorKind::SessionPoisoned])
                        } else {
                            model.violation(vec![ErrorKind::UnexpectedFrame])
                        };
                        let outcome = session.host_call(command, deadline, output);
                        check_outcome("worker host_call", &verdict, &outcome);
                    }
                }
            }
        }
        check_state(
            "worker",
            &model,
            session.state(),
            session.in_flight(),
            session.poison_cause(),
        );
        trace.push(session.state());
        if model.phase != Phase::Poisoned {
            assert_eq!(session.process_enabled(), model.process_enabled);
            assert_eq!(session.host_calls_allowed(), model.host_calls_allowed);
        }
    }
    assert_poisoned_worker_is_inert(&mut session, &model);
    trace
}

fn assert_poisoned_worker_is_inert(session: &mut WorkerSession, model: &Model) {
    if model.phase != Phase::Poisoned {
        return;
    }
    let request = ParentFrame::Request {
        request: Request {
            id: u64::MAX,
            operation: Operation::Eval {
                source: String::new(),
            },
        },
    };
    let init = ParentFrame::Request {
        request: Request {
            id: u64::MAX,
            operation: Operation::initialize(Policy::quirl_config_profile(), None, true),
        },
    };
    let poisoned = |outcome: Result<(), ProtocolError>| {
        assert_eq!(
            outcome.map_err(|e| e.kind()),
            Err(ErrorKind::SessionPoisoned)
        );
    };
    poisoned(session.receive(&request));
    poisoned(session.receive(&init));
    poisoned(session.receive_payload(b"{}").map(drop));
    poisoned(session.respond(Ok(Value::Null)).map(drop));
    poisoned(session.host_call("true", 1, 1).map(drop));
    assert_eq!(session.state(), SessionState::Poisoned);
}

// ----- parent session -------------------------------------------------------------

fn parent_send(session: &mut ParentSession, model: &mut Model, frame: &ParentFrame) {
    let verdict = match frame {
        ParentFrame::Request { request } => model.request(request),
        ParentFrame::HostResponse { response } => model.host_response(response),
    };
    let outcome = session.send(frame);
    check_outcome("parent send", &verdict, &outcome);
    if let Ok(bytes) = outcome {
        let (length, payload) = bytes.split_at(4);
        assert_eq!(length, (payload.len() as u32).to_be_bytes());
        assert_eq!(decode_parent_frame(payload).ok().as_ref(), Some(frame));
    }
}

fn parent_receive(
    session: &mut ParentSession,
    model: &mut Model,
    frame: &WorkerFrame,
    bytes: bool,
) {
    let in_flight = model.in_flight();
    let verdict = match frame {
        WorkerFrame::Response { response } => match model.response_identity(response) {
            Some(kinds) => {
                if !kinds.contains(&ErrorKind::SessionPoisoned) {
                    model.phase = Phase::Poisoned;
                }
                Verdict::Violation(kinds)
            }
            None => {
                let kind = in_flight.map(|(_, kind)| kind);
                match (&response.result, kind) {
                    (Ok(value), Some(kind)) if !result_fits(kind, value) => {
                        // The parent re-validates the result: a violation of some decode kind.
                        model.phase = Phase::Poisoned;
                        Verdict::Violation(
                            ErrorKind::ALL
                                .iter()
                                .copied()
                                .filter(|kind| {
                                    !matches!(
                                        kind,
                                        ErrorKind::SessionPoisoned
                                            | ErrorKind::UnexpectedFrame
                                            | ErrorKind::IdentityMismatch
                                            | ErrorKind::HostCallLimit
                                    )
                                })
                                .collect(),
                        )
                    }
                    _ => {
                        model.apply_response(response.result.is_ok());
                        Verdict::Accept
                    }
                }
            }
        },
        WorkerFrame::HostCall { call } => model.host_call(call),
    };
    let outcome = if bytes {
        match frame.encode() {
            Ok(payload) => session.receive_payload(&payload),
            // A host call with an out-of-range field cannot be encoded; feed the struct.
            Err(_) => session.receive(frame.clone()),
        }
    } else {
        session.receive(frame.clone())
    };
    check_outcome("parent receive", &verdict, &outcome);
    match (outcome, frame) {
        (Ok(ParentEvent::HostCall(call)), WorkerFrame::HostCall { call: sent }) => {
            assert_eq!(&call, sent);
        }
        (
            Ok(ParentEvent::Response {
                id,
                operation,
                result,
            }),
            WorkerFrame::Response { response },
        ) => {
            assert_eq!(Some((id, operation)), in_flight);
            assert_eq!(result.is_ok(), response.result.is_ok());
            if let (Ok(typed), Ok(value)) = (&result, &response.result) {
                assert!(
                    typed.fits(operation),
                    "typed result does not fit {operation:?}"
                );
                if let OperationResult::Value(inner) = typed {
                    assert_eq!(inner, value);
                }
            }
        }
        (Ok(event), frame) => panic!("parent event {event:?} for frame {frame:?}"),
        (Err(_), _) => {}
    }
}

/// Target `parent_session`: a parent session driven through a sequence of
/// sent parent frames and received worker frames, against the model.
pub fn parent_session(data: &[u8]) {
    parent_session_trace(data);
}

/// [`parent_session`], returning the state after every step.
pub fn parent_session_trace(data: &[u8]) -> Vec<SessionState> {
    let mut trace = Vec::new();
    let mut src = Source::new(data);
    let mut session = ParentSession::new();
    let mut model = Model::new();
    for _ in 0..64 {
        if src.is_empty() {
            break;
        }
        let action = src.byte() % 9;
        match action {
            0 => {
                let frame = ParentFrame::Request {
                    request: choose_request(&mut src, &model),
                };
                parent_send(&mut session, &mut model, &frame);
            }
            1 => {
                // request(): the session picks the next id.
                let operation = choose_operation(&mut src);
                if model.phase == Phase::Poisoned {
                    let outcome = session.request(operation);
                    check_outcome(
                        "parent request",
                        &Verdict::Violation(vec![ErrorKind::SessionPoisoned]),
                        &outcome,
                    );
                } else {
                    let id = model.last_id.map_or(1, |last| last.saturating_add(1));
                    assert_eq!(session.next_request_id(), id);
                    let frame = ParentFrame::Request {
                        request: Request {
                            id,
                            operation: operation.clone(),
                        },
                    };
                    let verdict = model.request(match &frame {
                        ParentFrame::Request { request } => request,
                        ParentFrame::HostResponse { .. } => unreachable!(),
                    });
                    let outcome = session.request(operation);
                    check_outcome("parent request", &verdict, &outcome);
                    if let Ok((sent, _)) = outcome {
                        assert_eq!(sent, id);
                    }
                }
            }
            2 => {
                let frame = ParentFrame::HostResponse {
                    response: choose_host_response(&mut src, &model),
                };
                parent_send(&mut session, &mut model, &frame);
            }
            3 => {
                // host_response(): the session echoes the pending ids.
                let result = if src.flag() {
                    Ok(CommandOutcome {
                        status: 0,
                        stdout: None,
                        stderr: Some(src.text(4)),
                    })
                } else {
                    Err(error_record(&mut src))
                };
                let verdict = match model.phase {
                    Phase::Poisoned => Verdict::Violation(vec![ErrorKind::SessionPoisoned]),
                    Phase::Pending { id, call, .. } => model.host_response(&HostResponse {
                        request_id: id,
                        call_id: call,
                        result: result.clone(),
                    }),
                    _ => model.violation(vec![ErrorKind::UnexpectedFrame]),
                };
                check_outcome(
                    "parent host_response",
                    &verdict,
                    &session.host_response(result),
                );
            }
            4 | 5 => {
                let frame = WorkerFrame::Response {
                    response: choose_response(&mut src, &model),
                };
                parent_receive(&mut session, &mut model, &frame, action == 5);
            }
            6 | 7 => {
                let frame = WorkerFrame::HostCall {
                    call: choose_host_call(&mut src, &model),
                };
                parent_receive(&mut session, &mut model, &frame, action == 7);
            }
            _ => {
                let valid = WorkerFrame::Response {
                    response: choose_response(&mut src, &model),
                }
                .encode()
                .unwrap_or_default();
                let payload = garbage(&mut src, valid);
                match decode_worker_frame(&payload) {
                    Ok(frame) => parent_receive(&mut session, &mut model, &frame, true),
                    Err(error) => {
                        let verdict = if model.phase == Phase::Poisoned {
                            Verdict::Violation(vec![ErrorKind::SessionPoisoned])
                        } else {
                            model.violation(vec![error.kind()])
                        };
                        let outcome = session.receive_payload(&payload);
                        check_outcome("parent receive garbage", &verdict, &outcome);
                    }
                }
            }
        }
        check_state(
            "parent",
            &model,
            session.state(),
            session.in_flight(),
            session.poison_cause(),
        );
        trace.push(session.state());
    }
    if model.phase == Phase::Poisoned {
        let poisoned = |kind: Option<ErrorKind>| assert_eq!(kind, Some(ErrorKind::SessionPoisoned));
        poisoned(
            session
                .request(Operation::Eval {
                    source: String::new(),
                })
                .err()
                .map(|e| e.kind()),
        );
        poisoned(
            session
                .host_response(Err(ShellError::new(
                    quirl_lua_protocol::records::ErrorCode::Io,
                    "x",
                )))
                .err()
                .map(|e| e.kind()),
        );
        poisoned(session.receive_payload(b"{}").err().map(|e| e.kind()));
        assert_eq!(session.state(), SessionState::Poisoned);
    }
    trace
}
