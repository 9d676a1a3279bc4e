//! Sans-IO session state machines, one per role.
//!
//! A session sees every frame of one worker's life in order — the frames
//! its side sends as well as those it receives — and rejects any frame the
//! protocol state does not allow. Both roles share one transition table:
//!
//! | state | frame | next state | otherwise |
//! |---|---|---|---|
//! | `AwaitingInitialize` | request `initialize` (id > previous) | `Initializing` | `unexpected_frame` |
//! | `Initializing` | response ok (same id) | `Ready` | `identity_mismatch` |
//! | `Initializing` | response error (same id) | `Failed` | `identity_mismatch` |
//! | `Ready` | request (not `initialize`, id > previous) | `Busy` | `unexpected_frame` / `identity_mismatch` |
//! | `Busy` | response (same id; a `check` result other than `null` only when `initialize` granted `check.diagnostics`) | `Ready` | `identity_mismatch` / `wrong_type` |
//! | `Busy` | host call (same request id, call id = calls + 1 ≤ 16, process enabled and allowed by the policy) | `HostCallPending` | `identity_mismatch` / `host_call_limit` / `unexpected_frame` |
//! | `HostCallPending` | host response (echoes both ids; each captured stream within the call's `max_output_bytes`) | `Busy` | `identity_mismatch` / `domain_bounds` |
//! | `Failed` | anything | — | `unexpected_frame` |
//!
//! Any other frame in any state is `unexpected_frame`. The first violation
//! poisons the session for good: every later call fails with
//! `session_poisoned`, like a fatal TLS alert. A frame this side fails to
//! *encode* (for example a result over the frame limit) is not a protocol
//! violation: nothing was sent, the state is unchanged, and the caller may
//! send something else (such as an error response) instead.

use crate::codec::WireFrame;
use crate::error::{ErrorKind, ProtocolError};
use crate::limits::HOST_CALLS_PER_REQUEST_MAX;
use crate::records::results::check_free_form;
use crate::records::{
    CHECK_DIAGNOSTICS_GRANT, CommandOutcome, HostCall, HostResponse, Operation, OperationKind,
    OperationResult, ParentFrame, Request, Response, ShellError, WorkerFrame,
};
use serde_json::Value;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionState {
    /// Nothing sent yet; the first request must be `initialize`.
    AwaitingInitialize,
    /// `initialize` is in flight.
    Initializing,
    /// Initialized and idle: the parent may send the next request.
    Ready,
    /// A request is in flight.
    Busy,
    /// The worker sent a host call and waits for the host response.
    HostCallPending,
    /// `initialize` failed; the worker must be discarded.
    Failed,
    /// A protocol violation happened; nothing is accepted any more.
    Poisoned,
    /// The worker retired after a `resource_limit` answer (SPEC §13.1-b)
    /// and its stream ended: the session is over without a violation, and
    /// a new worker is needed. Only a [`ParentConnection`](crate::ParentConnection)
    /// reports it.
    Retired,
    /// The parent gave up on the request in flight: its deadline passed
    /// ([`ParentConnection::handle_timeout`](crate::ParentConnection::handle_timeout),
    /// SPEC §10) or the parent cancelled it
    /// ([`ParentConnection::cancel`](crate::ParentConnection::cancel)).
    /// The worker may still be running it: it must be killed (SPEC §13.2,
    /// [`ParentConnection::must_kill`](crate::ParentConnection::must_kill)),
    /// and every later call is refused with `deadline_passed` or
    /// `cancelled`. Not a violation by the worker. Only a
    /// [`ParentConnection`](crate::ParentConnection) reports it.
    Abandoned,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: u64,
    kind: OperationKind,
    calls: u32,
    pending_call: Option<u32>,
    /// `max_output_bytes` of the pending call.
    pending_output_max: u64,
}

/// The shared transition table (see the module docs).
#[derive(Debug, Clone)]
struct Machine {
    initialized: Option<bool>,
    process_enabled: bool,
    /// `process_enabled` and the policy's `allow_process`, both fixed by `initialize`.
    host_calls_allowed: bool,
    /// `initialize` granted `check.diagnostics`: `check` may answer with a
    /// report instead of `null` (SPEC §7.2).
    check_reports: bool,
    last_request_id: Option<u64>,
    in_flight: Option<InFlight>,
    poisoned: Option<ProtocolError>,
}

/// The state change a valid frame causes, applied only once the frame is accepted.
enum Step {
    Request {
        id: u64,
        kind: OperationKind,
        /// `initialize` only: `process_enabled` and whether host calls are allowed.
        process: Option<(bool, bool)>,
        /// `initialize` only: whether it granted `check.diagnostics`.
        check_reports: bool,
    },
    Response {
        ok: bool,
    },
    HostCall {
        call_id: u32,
        max_output_bytes: u64,
    },
    HostResponse,
}

fn unexpected(message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(ErrorKind::UnexpectedFrame, message)
}

fn mismatch(message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(ErrorKind::IdentityMismatch, message)
}

impl Machine {
    fn new() -> Self {
        Self {
            initialized: None,
            process_enabled: false,
            host_calls_allowed: false,
            check_reports: false,
            last_request_id: None,
            in_flight: None,
            poisoned: None,
        }
    }

    fn state(&self) -> SessionState {
        if self.poisoned.is_some() {
            return SessionState::Poisoned;
        }
        match (self.initialized, self.in_flight) {
            (None, None) => SessionState::AwaitingInitialize,
            (None, Some(_)) => SessionState::Initializing,
            (Some(false), _) => SessionState::Failed,
            (Some(true), None) => SessionState::Ready,
            (
                Some(true),
                Some(InFlight {
                    pending_call: None, ..
                }),
            ) => SessionState::Busy,
            (Some(true), Some(_)) => SessionState::HostCallPending,
        }
    }

    fn check_alive(&self) -> Result<(), ProtocolError> {
        match &self.poisoned {
            Some(cause) => Err(ProtocolError::new(
                ErrorKind::SessionPoisoned,
                format!("the session failed earlier ({})", cause.kind()),
            )
            .with_context(cause.to_string())),
            None => Ok(()),
        }
    }

    fn check_request(&self, request: &Request) -> Result<Step, ProtocolError> {
        if self.initialized == Some(false) {
            return Err(unexpected(
                "initialize failed; the worker accepts no further request",
            ));
        }
        if let Some(in_flight) = self.in_flight {
            return Err(unexpected(if in_flight.pending_call.is_some() {
                "a request was sent while a host call is pending"
            } else {
                "a request was sent while another request is in flight"
            }));
        }
        if let Some(last) = self.last_request_id
            && request.id <= last
        {
            return Err(mismatch(format!(
                "request id {} does not increase (previous {last})",
                request.id
            )));
        }
        let kind = request.operation.kind();
        let check_reports = matches!(
            &request.operation,
            Operation::Initialize { grants: Some(grants), .. }
                if grants.iter().any(|grant| grant == CHECK_DIAGNOSTICS_GRANT)
        );
        let process = match (&request.operation, self.initialized) {
            (
                Operation::Initialize {
                    policy,
                    process_enabled,
                    ..
                },
                None,
            ) => Some((*process_enabled, *process_enabled && policy.allow_process())),
            (Operation::Initialize { .. }, Some(_)) => {
                return Err(unexpected("a second initialize request"));
            }
            (_, None) => {
                return Err(unexpected(format!(
                    "`{}` request before initialize",
                    kind.as_str()
                )));
            }
            (_, Some(_)) => None,
        };
        Ok(Step::Request {
            id: request.id,
            kind,
            process,
            check_reports,
        })
    }

    fn check_response(&self, response: &Response) -> Result<Step, ProtocolError> {
        let Some(in_flight) = self.in_flight else {
            return Err(unexpected("a response while no request is in flight"));
        };
        if in_flight.pending_call.is_some() {
            return Err(unexpected("a response while a host call is pending"));
        }
        if response.id != in_flight.id {
            return Err(mismatch(format!(
                "response id {} does not match the request in flight ({})",
                response.id, in_flight.id
            )));
        }
        Ok(Step::Response {
            ok: response.result.is_ok(),
        })
    }

    fn check_host_call(&self, call: &HostCall) -> Result<Step, ProtocolError> {
        let Some(in_flight) = self.in_flight else {
            return Err(unexpected("a host call while no request is in flight"));
        };
        if in_flight.pending_call.is_some() {
            return Err(unexpected("a host call while another host call is pending"));
        }
        if in_flight.kind == OperationKind::Initialize {
            return Err(unexpected("a host call during initialize"));
        }
        if !self.process_enabled {
            return Err(unexpected(
                "a host call from a worker initialized with process access disabled",
            ));
        }
        if !self.host_calls_allowed {
            return Err(unexpected(
                "a host call from a worker whose policy does not allow processes",
            ));
        }
        if call.request_id != in_flight.id {
            return Err(mismatch(format!(
                "host call for request {} while request {} is in flight",
                call.request_id, in_flight.id
            )));
        }
        if in_flight.calls >= HOST_CALLS_PER_REQUEST_MAX {
            return Err(ProtocolError::new(
                ErrorKind::HostCallLimit,
                format!("more than {HOST_CALLS_PER_REQUEST_MAX} host calls in one request"),
            ));
        }
        let expected = in_flight.calls + 1;
        if call.call_id != expected {
            return Err(mismatch(format!(
                "host call id {} where {expected} was due",
                call.call_id
            )));
        }
        Ok(Step::HostCall {
            call_id: call.call_id,
            max_output_bytes: call.max_output_bytes,
        })
    }

    fn check_host_response(&self, response: &HostResponse) -> Result<Step, ProtocolError> {
        let Some(InFlight {
            id,
            pending_call: Some(call_id),
            pending_output_max,
            ..
        }) = self.in_flight
        else {
            return Err(unexpected("a host response without a pending host call"));
        };
        if response.request_id != id || response.call_id != call_id {
            return Err(mismatch(format!(
                "host response for request {} call {} while request {id} call {call_id} is pending",
                response.request_id, response.call_id
            )));
        }
        if let Ok(outcome) = &response.result {
            for (name, stream) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
                let captured = stream.as_deref().map_or(0, CommandOutcome::captured_bytes);
                if u64::try_from(captured).map_or(true, |bytes| bytes > pending_output_max) {
                    return Err(ProtocolError::domain(format!(
                        "{name} holds {captured} captured bytes; the host call allowed at most {pending_output_max}"
                    ))
                    .at(name)
                    .at("outcome"));
                }
            }
        }
        Ok(Step::HostResponse)
    }

    fn check_parent(&self, frame: &ParentFrame) -> Result<Step, ProtocolError> {
        match frame {
            ParentFrame::Request { request } => self.check_request(request),
            ParentFrame::HostResponse { response } => self.check_host_response(response),
        }
    }

    fn check_worker(&self, frame: &WorkerFrame) -> Result<Step, ProtocolError> {
        match frame {
            WorkerFrame::Response { response } => self.check_response(response),
            WorkerFrame::HostCall { call } => self.check_host_call(call),
        }
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Request {
                id,
                kind,
                process,
                check_reports,
            } => {
                if let Some((enabled, allowed)) = process {
                    self.process_enabled = enabled;
                    self.host_calls_allowed = allowed;
                    self.check_reports = check_reports;
                }
                self.last_request_id = Some(id);
                self.in_flight = Some(InFlight {
                    id,
                    kind,
                    calls: 0,
                    pending_call: None,
                    pending_output_max: 0,
                });
            }
            Step::Response { ok } => {
                if let Some(in_flight) = self.in_flight.take()
                    && in_flight.kind == OperationKind::Initialize
                {
                    self.initialized = Some(ok);
                }
            }
            Step::HostCall {
                call_id,
                max_output_bytes,
            } => {
                if let Some(in_flight) = &mut self.in_flight {
                    in_flight.calls = call_id;
                    in_flight.pending_call = Some(call_id);
                    in_flight.pending_output_max = max_output_bytes;
                }
            }
            Step::HostResponse => {
                if let Some(in_flight) = &mut self.in_flight {
                    in_flight.pending_call = None;
                }
            }
        }
    }

    /// Run a check; a violation poisons the machine.
    fn guard(
        &mut self,
        check: impl FnOnce(&Self) -> Result<Step, ProtocolError>,
    ) -> Result<Step, ProtocolError> {
        self.check_alive()?;
        check(self).map_err(|error| self.poison(error))
    }

    fn poison(&mut self, error: ProtocolError) -> ProtocolError {
        if self.poisoned.is_none() {
            self.poisoned = Some(error.clone());
        }
        error
    }

    fn in_flight(&self) -> Option<(u64, OperationKind)> {
        self.in_flight
            .map(|in_flight| (in_flight.id, in_flight.kind))
    }
}

/// A `check` result other than `null` needs the `check.diagnostics` grant
/// (SPEC §7.2): without it the result is `wrong_type`, as before reports
/// existed.
fn check_report_negotiated(
    kind: OperationKind,
    value: &Value,
    negotiated: bool,
) -> Result<(), ProtocolError> {
    if kind == OperationKind::Check && !value.is_null() && !negotiated {
        return Err(ProtocolError::new(
            ErrorKind::WrongType,
            format!(
                "the result of check must be null: initialize did not grant `{CHECK_DIAGNOSTICS_GRANT}`"
            ),
        )
        .at("result"));
    }
    Ok(())
}

/// Check a successful result against its operation's typed result, without
/// copying free-form values; `negotiated`: whether `check` may answer with
/// a report.
fn validate_result(
    kind: OperationKind,
    value: &Value,
    negotiated: bool,
) -> Result<(), ProtocolError> {
    check_report_negotiated(kind, value, negotiated)?;
    match kind {
        OperationKind::Eval | OperationKind::Complete | OperationKind::Contribution => {
            check_free_form(kind, value).map_err(|e| e.at("result"))
        }
        _ => OperationResult::decode(kind, value).map(drop),
    }
}

/// The worker's side of a session: checks every parent frame it receives
/// and every frame it sends.
///
/// ```
/// use quirl_lua_protocol::*;
/// use quirl_lua_protocol::records::*;
///
/// let mut session = WorkerSession::new();
/// let init = ParentFrame::Request {
///     request: Request { id: 1, operation: Operation::initialize(Policy::quirl_config_profile(), None, false) },
/// };
/// session.receive(&init)?;
/// let bytes = session.respond(Ok(serde_json::Value::Null))?; // framed, ready to write
/// assert_eq!(&bytes[4..], br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#);
/// // A second initialize is a violation, and the session stays poisoned.
/// let again = ParentFrame::Request {
///     request: Request { id: 2, operation: Operation::initialize(Policy::quirl_config_profile(), None, false) },
/// };
/// assert_eq!(session.receive(&again).unwrap_err().kind(), ErrorKind::UnexpectedFrame);
/// assert_eq!(session.state(), SessionState::Poisoned);
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug, Clone)]
pub struct WorkerSession {
    machine: Machine,
}

impl Default for WorkerSession {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerSession {
    /// A fresh session awaiting `initialize`.
    pub fn new() -> Self {
        Self {
            machine: Machine::new(),
        }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.machine.state()
    }

    /// The violation that poisoned the session, if any.
    pub fn poison_cause(&self) -> Option<&ProtocolError> {
        self.machine.poisoned.as_ref()
    }

    /// The request in flight: its id and operation.
    pub fn in_flight(&self) -> Option<(u64, OperationKind)> {
        self.machine.in_flight()
    }

    /// Whether `initialize` enabled host calls.
    pub fn process_enabled(&self) -> bool {
        self.machine.process_enabled
    }

    /// Whether this worker may send host calls: `initialize` had both
    /// `process_enabled` and a policy with `allow_process`.
    pub fn host_calls_allowed(&self) -> bool {
        self.machine.host_calls_allowed
    }

    /// Accept a decoded parent frame, or report (and poison on) a violation.
    pub fn receive(&mut self, frame: &ParentFrame) -> Result<(), ProtocolError> {
        let step = self.machine.guard(|machine| machine.check_parent(frame))?;
        self.machine.apply(step);
        Ok(())
    }

    /// Poison the session with a violation found outside it (framing, end of stream).
    pub(crate) fn poison(&mut self, error: ProtocolError) -> ProtocolError {
        self.machine.poison(error)
    }

    /// `session_poisoned` once poisoned.
    pub(crate) fn check_alive(&self) -> Result<(), ProtocolError> {
        self.machine.check_alive()
    }

    /// Host calls made so far for the request in flight.
    pub(crate) fn host_calls_made(&self) -> u32 {
        self.machine
            .in_flight
            .map_or(0, |in_flight| in_flight.calls)
    }

    /// Decode a parent payload strictly and accept it; decode errors poison too.
    pub fn receive_payload(&mut self, payload: &[u8]) -> Result<ParentFrame, ProtocolError> {
        self.machine.check_alive()?;
        let frame = ParentFrame::decode(payload).map_err(|error| self.machine.poison(error))?;
        self.receive(&frame)?;
        Ok(frame)
    }

    /// Check and encode a frame to send; returns the framed bytes to write.
    ///
    /// A successful response's result is checked against the typed result
    /// of the operation in flight; like an encoding failure, a bad result
    /// is reported without poisoning, so an error response can follow.
    pub fn send(&mut self, frame: &WorkerFrame) -> Result<Vec<u8>, ProtocolError> {
        let step = self.machine.guard(|machine| machine.check_worker(frame))?;
        if let (
            WorkerFrame::Response {
                response: Response {
                    result: Ok(value), ..
                },
            },
            Some((_, kind)),
        ) = (frame, self.machine.in_flight())
        {
            validate_result(kind, value, self.machine.check_reports)?;
        }
        let bytes = frame.encode_framed()?;
        self.machine.apply(step);
        Ok(bytes)
    }

    /// Answer the request in flight with a result or an error record.
    pub fn respond(&mut self, result: Result<Value, ShellError>) -> Result<Vec<u8>, ProtocolError> {
        self.machine.check_alive()?;
        let Some((id, _)) = self.machine.in_flight() else {
            return Err(self
                .machine
                .poison(unexpected("a response while no request is in flight")));
        };
        self.send(&WorkerFrame::Response {
            response: Response { id, result },
        })
    }

    /// Ask the parent to run a process for the request in flight (next call id).
    pub fn host_call(
        &mut self,
        command: impl Into<String>,
        deadline_ms: u64,
        max_output_bytes: u64,
    ) -> Result<Vec<u8>, ProtocolError> {
        self.machine.check_alive()?;
        let Some(in_flight) = self.machine.in_flight else {
            return Err(self
                .machine
                .poison(unexpected("a host call while no request is in flight")));
        };
        self.send(&WorkerFrame::HostCall {
            call: HostCall {
                request_id: in_flight.id,
                call_id: in_flight.calls.saturating_add(1),
                command: command.into(),
                deadline_ms,
                max_output_bytes,
            },
        })
    }
}

/// What the parent received from the worker, checked against the session.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum ParentEvent {
    /// The answer to the request in flight, its result re-validated for the operation.
    Response {
        /// Request id.
        id: u64,
        /// The operation that was answered.
        operation: OperationKind,
        /// The typed result, or the worker's error record.
        result: Result<OperationResult, ShellError>,
    },
    /// The worker asks the parent to run a process; answer with
    /// [`ParentSession::host_response`].
    HostCall(HostCall),
}

/// The parent's side of a session: checks every frame it sends and every
/// worker frame it receives, re-validating results per operation.
#[derive(Debug, Clone)]
pub struct ParentSession {
    machine: Machine,
}

impl Default for ParentSession {
    fn default() -> Self {
        Self::new()
    }
}

impl ParentSession {
    /// A fresh session; the first request must be `initialize`.
    pub fn new() -> Self {
        Self {
            machine: Machine::new(),
        }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.machine.state()
    }

    /// The violation that poisoned the session, if any.
    pub fn poison_cause(&self) -> Option<&ProtocolError> {
        self.machine.poisoned.as_ref()
    }

    /// The request in flight: its id and operation.
    pub fn in_flight(&self) -> Option<(u64, OperationKind)> {
        self.machine.in_flight()
    }

    /// Whether the worker may send host calls: `initialize` had both
    /// `process_enabled` and a policy with `allow_process`. A host call in
    /// any other session is a violation, so a host that imports this crate
    /// alone fails closed.
    pub fn host_calls_allowed(&self) -> bool {
        self.machine.host_calls_allowed
    }

    /// The id the next [`ParentSession::request`] will use.
    pub fn next_request_id(&self) -> u64 {
        self.machine
            .last_request_id
            .map_or(1, |last| last.saturating_add(1))
    }

    /// Check and encode a frame to send; returns the framed bytes to write.
    pub fn send(&mut self, frame: &ParentFrame) -> Result<Vec<u8>, ProtocolError> {
        let step = self.machine.guard(|machine| machine.check_parent(frame))?;
        let bytes = frame.encode_framed()?;
        self.machine.apply(step);
        Ok(bytes)
    }

    /// Send `operation` as the next request (ids 1, 2, …); returns its id and the framed bytes.
    pub fn request(&mut self, operation: Operation) -> Result<(u64, Vec<u8>), ProtocolError> {
        self.machine.check_alive()?;
        let id = self.next_request_id();
        let bytes = self.send(&ParentFrame::Request {
            request: Request { id, operation },
        })?;
        Ok((id, bytes))
    }

    /// Answer the pending host call.
    pub fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Vec<u8>, ProtocolError> {
        self.machine.check_alive()?;
        let Some(InFlight {
            id,
            pending_call: Some(call_id),
            ..
        }) = self.machine.in_flight
        else {
            return Err(self
                .machine
                .poison(unexpected("a host response without a pending host call")));
        };
        self.send(&ParentFrame::HostResponse {
            response: HostResponse {
                request_id: id,
                call_id,
                result,
            },
        })
    }

    /// Accept a decoded worker frame, or report (and poison on) a violation.
    pub fn receive(&mut self, frame: WorkerFrame) -> Result<ParentEvent, ProtocolError> {
        let kind = self.machine.in_flight().map(|(_, kind)| kind);
        let step = self.machine.guard(|machine| machine.check_worker(&frame))?;
        self.machine.apply(step);
        match frame {
            WorkerFrame::HostCall { call } => Ok(ParentEvent::HostCall(call)),
            WorkerFrame::Response { response } => {
                let operation = kind.unwrap_or(OperationKind::Eval);
                let result = match response.result {
                    Ok(value) => Ok(match operation {
                        OperationKind::Eval
                        | OperationKind::Complete
                        | OperationKind::Contribution => {
                            validate_result(operation, &value, false)
                                .map_err(|error| self.machine.poison(error))?;
                            OperationResult::Value(value)
                        }
                        _ => check_report_negotiated(operation, &value, self.machine.check_reports)
                            .and_then(|()| OperationResult::decode(operation, &value))
                            .map_err(|error| self.machine.poison(error))?,
                    }),
                    Err(error) => Err(error),
                };
                Ok(ParentEvent::Response {
                    id: response.id,
                    operation,
                    result,
                })
            }
        }
    }

    /// Poison the session with a violation found outside it (framing, end of stream).
    pub(crate) fn poison(&mut self, error: ProtocolError) -> ProtocolError {
        self.machine.poison(error)
    }

    /// `session_poisoned` once poisoned.
    pub(crate) fn check_alive(&self) -> Result<(), ProtocolError> {
        self.machine.check_alive()
    }

    /// `max_output_bytes` of the pending host call, if one is pending.
    pub(crate) fn pending_output_max(&self) -> Option<u64> {
        self.machine
            .in_flight
            .filter(|in_flight| in_flight.pending_call.is_some())
            .map(|in_flight| in_flight.pending_output_max)
    }

    /// Decode a worker payload strictly and accept it; decode errors poison too.
    pub fn receive_payload(&mut self, payload: &[u8]) -> Result<ParentEvent, ProtocolError> {
        self.machine.check_alive()?;
        let frame = WorkerFrame::decode(payload).map_err(|error| self.machine.poison(error))?;
        self.receive(frame)
    }
}
