//! The parent's connection: requests and host responses out, responses and
//! host calls in.

use super::{FrameInbox, Outbox, ended_error};
use crate::error::{ErrorKind, ProtocolError};
use crate::records::{CommandOutcome, Operation, OperationKind, ShellError};
use crate::session::{ParentEvent, ParentSession, SessionState};

/// The parent's side of one worker's session, sans-IO (see the
/// [module docs](crate::connection)).
///
/// ```
/// use quirl_lua_protocol::{ErrorKind, ParentConnection, ParentEvent};
/// use quirl_lua_protocol::records::{Operation, OperationResult, Policy};
///
/// let mut connection = ParentConnection::new();
/// let id = connection.request(Operation::initialize(Policy::quirl_config_profile(), None, false))?;
/// let request = connection.take_outgoing(); // write these bytes to the worker's stdin
/// assert_eq!(&request[..4], &(request.len() as u32 - 4).to_be_bytes());
///
/// // A second request while `initialize` is in flight is the caller's
/// // mistake: refused, nothing written, the session stays healthy.
/// let early = connection.request(Operation::Eval { source: "return 1".into() });
/// assert_eq!(early.unwrap_err().kind(), ErrorKind::InvalidUse);
///
/// // Bytes from the worker's stderr, in any chunking.
/// let answer = br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#;
/// let framed = quirl_lua_protocol::frame_payload(answer)?;
/// connection.feed(&framed[..3])?;
/// assert_eq!(connection.poll_event()?, None);
/// connection.feed(&framed[3..])?;
/// let Some(ParentEvent::Response { id: answered, result, .. }) = connection.poll_event()? else {
///     unreachable!("a complete response was fed");
/// };
/// assert_eq!((answered, result), (id, Ok(OperationResult::Null)));
/// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
/// ```
#[derive(Debug, Default)]
pub struct ParentConnection {
    session: ParentSession,
    inbox: FrameInbox,
    outbox: Outbox,
}

impl ParentConnection {
    /// A connection to a freshly spawned worker; the first request must be
    /// `initialize`.
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

    /// The id the next [`request`](Self::request) will carry.
    pub fn next_request_id(&self) -> u64 {
        self.session.next_request_id()
    }

    /// Whether the worker may send host calls (`initialize` had both
    /// `process_enabled` and a policy with `allow_process`).
    pub fn host_calls_allowed(&self) -> bool {
        self.session.host_calls_allowed()
    }

    /// The violation that poisoned the connection, if any.
    pub fn poison_cause(&self) -> Option<&ProtocolError> {
        self.session.poison_cause()
    }

    /// Whether no worker byte was received since the last complete frame.
    pub fn is_quiet(&self) -> bool {
        self.inbox.is_quiet()
    }

    /// Whether [`end_of_stream`](Self::end_of_stream) was accepted.
    pub fn is_ended(&self) -> bool {
        self.inbox.is_ended()
    }

    /// The session, read-only.
    pub fn session(&self) -> &ParentSession {
        &self.session
    }

    /// Send `operation` as the next request (ids 1, 2, …) and return its id.
    ///
    /// Allowed as the first request if it is `initialize`, and in `Ready`
    /// for any other operation; otherwise `invalid_use` (nothing written,
    /// not poisoned). Bytes the worker sent while it had to be silent are
    /// a violation (`unexpected_frame`, SPEC §9.3) found here.
    pub fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        self.session.check_alive()?;
        if self.inbox.is_ended() {
            return Err(ended_error("worker"));
        }
        let kind = operation.kind();
        match (self.session.state(), kind) {
            (SessionState::AwaitingInitialize, OperationKind::Initialize) => {}
            (SessionState::Ready, kind) if kind != OperationKind::Initialize => {}
            (SessionState::AwaitingInitialize, kind) => {
                return Err(ProtocolError::invalid_use(format!(
                    "`{}` before initialize; the first request must be initialize",
                    kind.as_str()
                )));
            }
            (SessionState::Ready, _) => {
                return Err(ProtocolError::invalid_use(
                    "a second initialize; a worker is initialized once",
                ));
            }
            (SessionState::Failed, _) => {
                return Err(ProtocolError::invalid_use(
                    "initialize failed; this worker accepts no further request",
                ));
            }
            (_, _) => {
                let busy = self.in_flight().map_or(0, |(id, _)| id);
                return Err(ProtocolError::invalid_use(format!(
                    "request {busy} is still in flight; one request at a time"
                )));
            }
        }
        self.expect_silence("while no request was in flight")?;
        let (id, bytes) = self.session.request(operation)?;
        self.outbox.push(bytes);
        Ok(id)
    }

    /// Answer the pending host call with the command's outcome or an error
    /// record. `invalid_use` if no host call is pending or an outcome holds
    /// more captured bytes than the call allowed.
    pub fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.session.check_alive()?;
        if self.inbox.is_ended() {
            return Err(ended_error("worker"));
        }
        let Some(output_max) = self.session.pending_output_max() else {
            return Err(ProtocolError::invalid_use(
                "a host response without a pending host call",
            ));
        };
        if let Ok(outcome) = &result {
            for (name, stream) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
                let captured = stream.as_deref().map_or(0, CommandOutcome::captured_bytes);
                if u64::try_from(captured).map_or(true, |bytes| bytes > output_max) {
                    return Err(ProtocolError::invalid_use(format!(
                        "{name} holds {captured} captured bytes; the host call allowed at most {output_max}"
                    )));
                }
            }
        }
        self.expect_silence("while its host call was pending")?;
        let bytes = self.session.host_response(result)?;
        self.outbox.push(bytes);
        Ok(())
    }

    /// Give the connection bytes read from the worker (any chunking).
    /// `invalid_use` after [`end_of_stream`](Self::end_of_stream).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.inbox.is_ended() {
            return Err(ended_error("worker"));
        }
        self.inbox.push(bytes);
        Ok(())
    }

    /// The next frame the session accepted, or `Ok(None)` when the fed
    /// bytes hold no complete frame. A violation poisons the connection.
    pub fn poll_event(&mut self) -> Result<Option<ParentEvent>, ProtocolError> {
        self.session.check_alive()?;
        let payload = match self.inbox.next_payload() {
            Ok(Some(payload)) => payload,
            Ok(None) => return Ok(None),
            Err(error) => return Err(self.session.poison(error)),
        };
        self.session.receive_payload(&payload).map(Some)
    }

    /// The worker's stream ended (SPEC §9.5). Call it after
    /// [`poll_event`](Self::poll_event) returned `Ok(None)`.
    ///
    /// `Ok` when the stream ended at a frame boundary with nothing in
    /// flight (the worker exited between requests; the session is over).
    /// A stream cut inside a frame is `truncated_header`/`truncated_frame`;
    /// one that ended while a request was in flight is `unexpected_end`
    /// (the worker crashed or quit mid-request); both poison. `invalid_use`
    /// if fed bytes were not polled yet.
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
            Some((id, kind)) => Err(self.session.poison(ProtocolError::new(
                ErrorKind::UnexpectedEnd,
                format!(
                    "the worker's stream ended during request {id} ({})",
                    kind.as_str()
                ),
            ))),
        }
    }

    /// Bytes to write to the worker, oldest first.
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

    /// A violation if the worker sent anything (buffered bytes included)
    /// at a moment when it must be silent (SPEC §9.3).
    fn expect_silence(&mut self, when: &str) -> Result<(), ProtocolError> {
        if self.inbox.is_quiet() {
            return Ok(());
        }
        // A complete frame is judged by the session (and refused: nothing
        // is due); a partial one is refused here.
        self.poll_event()?;
        Err(self.session.poison(ProtocolError::new(
            ErrorKind::UnexpectedFrame,
            format!("the worker sent bytes {when}"),
        )))
    }
}
