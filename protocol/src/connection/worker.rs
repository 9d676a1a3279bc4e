//! The worker's connection: requests and host responses in, responses and
//! host calls out, with the respond-or-error path of SPEC §4.2 and DESIGN §15.10.

use super::{FrameInbox, Outbox, ended_error};
use crate::error::{ErrorKind, ProtocolError};
use crate::limits::HOST_CALLS_PER_REQUEST_MAX;
use crate::records::{
    HostResponse, OperationKind, OperationResult, ParentFrame, Request, ShellError,
};
use crate::session::{SessionState, WorkerSession};
use serde_json::Value;

/// What the worker received from the parent, checked against the session.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// The next request; answer it with [`WorkerConnection::respond`] (or
    /// one of its variants) before anything else arrives.
    Request(Request),
    /// The answer to the pending host call (ids already checked).
    HostResponse(HostResponse),
}

/// A host call's parameters, by name (see SPEC §6.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// The command line for the parent's process host.
    pub command: String,
    /// How long the command may run, in milliseconds.
    pub deadline_ms: u64,
    /// The most captured bytes per stream the worker accepts back.
    pub max_output_bytes: u64,
}

/// How [`WorkerConnection::respond_or_error`] (or
/// [`ParentConnection::host_response_or_error`](crate::ParentConnection::host_response_or_error))
/// answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Responded {
    /// With the result or error record the caller gave.
    AsGiven,
    /// With an error record, because what the caller gave could not be
    /// sent; `reason` says why (e.g. `oversized_frame`, or the sub-kind of
    /// a result that does not fit the operation).
    WithError {
        /// Why the given answer could not be sent.
        reason: ProtocolError,
    },
}

/// The worker's side of a session, sans-IO (see the
/// [module docs](crate::connection)).
///
/// ```
/// use quirl_lua_protocol::{ParentConnection, WorkerConnection, WorkerEvent};
/// use quirl_lua_protocol::records::{Operation, OperationResult, Policy};
///
/// let mut parent = ParentConnection::new();
/// let mut worker = WorkerConnection::new();
/// parent.request(Operation::initialize(Policy::quirl_config_profile(), None, false))?;
/// worker.feed(&parent.take_outgoing())?;
/// let Some(WorkerEvent::Request(request)) = worker.poll_event()? else {
///     unreachable!("initialize was fed");
/// };
/// assert!(matches!(request.operation, Operation::Initialize { .. }));
/// worker.respond(Ok(OperationResult::Null))?;
/// parent.feed(&worker.take_outgoing())?;
/// assert!(parent.poll_event()?.is_some());
/// // The parent closes the worker's stdin between requests: a clean end.
/// worker.end_of_stream()?;
/// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
/// ```
#[derive(Debug, Default)]
pub struct WorkerConnection {
    session: WorkerSession,
    inbox: FrameInbox,
    outbox: Outbox,
}

/// Bytes of an encoder's complaint kept in a fallback error record.
pub(super) const FALLBACK_CONTEXT_BYTES_MAX: usize = 1024;

impl WorkerConnection {
    /// A connection awaiting `initialize`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The session state.
    pub fn state(&self) -> SessionState {
        self.session.state()
    }

    /// The request in flight: its id and operation.
    pub fn in_flight(&self) -> Option<(u64, OperationKind)> {
        self.session.in_flight()
    }

    /// Whether this worker may send host calls (`initialize` had both
    /// `process_enabled` and a policy with `allow_process`).
    pub fn host_calls_allowed(&self) -> bool {
        self.session.host_calls_allowed()
    }

    /// The violation that poisoned the connection, if any.
    pub fn poison_cause(&self) -> Option<&ProtocolError> {
        self.session.poison_cause()
    }

    /// Whether no parent byte was received since the last complete frame.
    pub fn is_quiet(&self) -> bool {
        self.inbox.is_quiet()
    }

    /// Whether [`end_of_stream`](Self::end_of_stream) was accepted.
    pub fn is_ended(&self) -> bool {
        self.inbox.is_ended()
    }

    /// The session, read-only.
    pub fn session(&self) -> &WorkerSession {
        &self.session
    }

    /// Give the connection bytes read from the parent (any chunking).
    /// `invalid_use` after [`end_of_stream`](Self::end_of_stream).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.inbox.is_ended() {
            return Err(ended_error("parent"));
        }
        self.inbox.push(bytes);
        Ok(())
    }

    /// The next frame the session accepted, or `Ok(None)` when the fed
    /// bytes hold no complete frame. A violation poisons the connection;
    /// the worker must then exit nonzero without writing (SPEC §9.6).
    pub fn poll_event(&mut self) -> Result<Option<WorkerEvent>, ProtocolError> {
        self.session.check_alive()?;
        let payload = match self.inbox.next_payload() {
            Ok(Some(payload)) => payload,
            Ok(None) => return Ok(None),
            Err(error) => return Err(self.session.poison(error)),
        };
        Ok(Some(match self.session.receive_payload(&payload)? {
            ParentFrame::Request { request } => WorkerEvent::Request(request),
            ParentFrame::HostResponse { response } => WorkerEvent::HostResponse(response),
        }))
    }

    /// The parent's stream (the worker's stdin) ended (SPEC §9.5). Call it
    /// after [`poll_event`](Self::poll_event) returned `Ok(None)`.
    ///
    /// `Ok` (a clean end: exit 0) at a frame boundary in
    /// `AwaitingInitialize`, `Ready` or `Failed`. A stream cut inside a
    /// frame is `truncated_header`/`truncated_frame`; one that ended while
    /// a request or host call was in flight is `unexpected_end`; both
    /// poison (exit nonzero). `invalid_use` if fed bytes were not polled.
    pub fn end_of_stream(&mut self) -> Result<(), ProtocolError> {
        self.session.check_alive()?;
        if self.inbox.has_unread() {
            return Err(ProtocolError::invalid_use(
                "fed bytes were not polled yet; call poll_event until it returns None first",
            ));
        }
        if let Err(error) = self.inbox.finish() {
            return Err(self.session.poison(error));
        }
        match self.session.in_flight() {
            None => Ok(()),
            Some((id, kind)) => {
                let what = if self.session.state() == SessionState::HostCallPending {
                    "while a host call"
                } else {
                    "during request"
                };
                Err(self.session.poison(ProtocolError::new(
                    ErrorKind::UnexpectedEnd,
                    format!(
                        "the parent's stream ended {what} of request {id} ({}) was pending",
                        kind.as_str()
                    ),
                )))
            }
        }
    }

    /// Answer the request in flight with its typed result or an error record.
    ///
    /// `invalid_use` when nothing is in flight, a host call is pending, or
    /// the result is not the operation's kind of result. A result or record
    /// that cannot be encoded (over the frame limit, outside a domain bound)
    /// fails with its sub-kind; nothing is written and the request is still
    /// in flight: use [`respond_or_error`](Self::respond_or_error) to fall
    /// back to an error record.
    pub fn respond(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<(), ProtocolError> {
        let kind = self.check_can_respond()?;
        let result = match result {
            Ok(typed) => {
                if !typed.fits(kind) {
                    return Err(ProtocolError::invalid_use(format!(
                        "this result does not answer a `{}` request",
                        kind.as_str()
                    )));
                }
                Ok(typed.to_value()?)
            }
            Err(record) => Err(record),
        };
        self.send_response(result)
    }

    /// [`respond`](Self::respond) for a result already held as JSON (e.g.
    /// converted from a script's values). It is checked against the
    /// operation in flight exactly as a typed result is (SPEC §7.2).
    pub fn respond_json(&mut self, result: Result<Value, ShellError>) -> Result<(), ProtocolError> {
        self.check_can_respond()?;
        self.send_response(result)
    }

    /// Answer the request in flight; if the given answer cannot be sent,
    /// answer with an error record instead: `resource_limit` for an answer
    /// over the frame limit (SPEC §4.2, DESIGN §15.10), `validation` for one that
    /// breaks a domain bound or does not fit the operation (SPEC §7.2).
    ///
    /// Fails only if no answer can be sent at all: `invalid_use` (nothing
    /// in flight, host call pending) or `session_poisoned`.
    pub fn respond_or_error(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let kind = self.check_can_respond()?;
        let result = match result {
            Ok(typed) if !typed.fits(kind) => Err(ProtocolError::new(
                ErrorKind::WrongType,
                format!("the result does not answer a `{}` request", kind.as_str()),
            )),
            Ok(typed) => typed.to_value().map(Ok),
            Err(record) => Ok(Err(record)),
        };
        match result {
            Ok(result) => self.respond_json_or_error(result),
            Err(reason) => self.fall_back(reason),
        }
    }

    /// [`respond_or_error`](Self::respond_or_error) for a result held as JSON.
    pub fn respond_json_or_error(
        &mut self,
        result: Result<Value, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_can_respond()?;
        match self.send_response(result) {
            Ok(()) => Ok(Responded::AsGiven),
            Err(reason) if self.session.poison_cause().is_none() && !reason.is_invalid_use() => {
                self.fall_back(reason)
            }
            Err(error) => Err(error),
        }
    }

    /// Ask the parent to run a command for the request in flight; returns
    /// the call id (1, 2, … per request). Wait for
    /// [`WorkerEvent::HostResponse`] before anything else.
    ///
    /// `invalid_use` unless a request other than `initialize` is in flight
    /// with no host call pending, host calls are allowed, and fewer than
    /// [`HOST_CALLS_PER_REQUEST_MAX`] calls were made. A command that
    /// cannot be encoded fails with its sub-kind; nothing is written.
    pub fn host_call(&mut self, call: HostCommand) -> Result<u32, ProtocolError> {
        self.session.check_alive()?;
        if self.inbox.is_ended() {
            return Err(ended_error("parent"));
        }
        match (self.session.state(), self.session.in_flight()) {
            (SessionState::Busy, Some((_, kind))) if kind != OperationKind::Initialize => {}
            (SessionState::HostCallPending, _) => {
                return Err(ProtocolError::invalid_use(
                    "a host call is already pending; wait for its host response",
                ));
            }
            _ => {
                return Err(ProtocolError::invalid_use(
                    "a host call needs a request other than initialize in flight",
                ));
            }
        }
        if !self.session.host_calls_allowed() {
            return Err(ProtocolError::invalid_use(
                "host calls are not allowed: initialize had process_enabled false or a policy without allow_process",
            ));
        }
        let made = self.session.host_calls_made();
        if made >= HOST_CALLS_PER_REQUEST_MAX {
            return Err(ProtocolError::invalid_use(format!(
                "{made} host calls were made for this request; at most {HOST_CALLS_PER_REQUEST_MAX} are allowed"
            )));
        }
        let bytes =
            self.session
                .host_call(call.command, call.deadline_ms, call.max_output_bytes)?;
        self.outbox.push(bytes);
        Ok(made + 1)
    }

    /// Bytes to write to the parent, oldest first.
    pub fn outgoing(&self) -> &[u8] {
        self.outbox.pending()
    }

    /// Report that the first `count` bytes of [`outgoing`](Self::outgoing) were written.
    pub fn consume_outgoing(&mut self, count: usize) {
        self.outbox.consume(count);
    }

    /// Take every byte still to be written.
    pub fn take_outgoing(&mut self) -> Vec<u8> {
        self.outbox.take()
    }

    /// The operation a response may answer now, or why none may be sent.
    fn check_can_respond(&self) -> Result<OperationKind, ProtocolError> {
        self.session.check_alive()?;
        match (self.session.state(), self.session.in_flight()) {
            (SessionState::Initializing | SessionState::Busy, Some((_, kind))) => Ok(kind),
            (SessionState::HostCallPending, _) => Err(ProtocolError::invalid_use(
                "a host call is pending; a response must wait for its host response",
            )),
            _ => Err(ProtocolError::invalid_use(
                "a response while no request is in flight",
            )),
        }
    }

    fn send_response(&mut self, result: Result<Value, ShellError>) -> Result<(), ProtocolError> {
        let bytes = self.session.respond(result)?;
        self.outbox.push(bytes);
        Ok(())
    }

    /// Answer with an error record saying why the answer could not be sent.
    fn fall_back(&mut self, reason: ProtocolError) -> Result<Responded, ProtocolError> {
        let mut detail = reason.to_string();
        if detail.len() > FALLBACK_CONTEXT_BYTES_MAX {
            let mut end = FALLBACK_CONTEXT_BYTES_MAX;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
        }
        let record = ShellError::new(
            reason.code(),
            "the worker could not send the operation's result",
        )
        .with_context(format!("protocol error: {}", reason.kind()))
        .with_context(detail);
        self.send_response(Err(record))?;
        Ok(Responded::WithError { reason })
    }
}
