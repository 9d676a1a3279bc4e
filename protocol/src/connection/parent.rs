//! The parent's connection: requests and host responses out, responses and
//! host calls in.

use super::worker::FALLBACK_CONTEXT_BYTES_MAX;
use super::{FrameInbox, Outbox, Responded, ended_error};
use crate::error::{ErrorKind, ProtocolError};
use crate::records::{CommandOutcome, ErrorCode, Operation, OperationKind, ShellError};
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
    /// The id of the last request, when it was answered with a
    /// `resource_limit` error and no worker byte arrived since: the worker
    /// may have retired (SPEC §13.1-a/b).
    may_retire_after: Option<u64>,
    /// The worker retired after answering this request (SPEC §13.1-b).
    retired_after: Option<u64>,
}

impl ParentConnection {
    /// A connection to a freshly spawned worker; the first request must be
    /// `initialize`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The session state; [`SessionState::Retired`] once the worker was
    /// found retired (SPEC §13.1-b).
    pub fn state(&self) -> SessionState {
        if self.retired_after.is_some() {
            return SessionState::Retired;
        }
        self.session.state()
    }

    /// The request in flight: its id and operation (none once retired: the
    /// request that met the retirement was not run).
    pub fn in_flight(&self) -> Option<(u64, OperationKind)> {
        if self.retired_after.is_some() {
            return None;
        }
        self.session.in_flight()
    }

    /// Whether the worker may have retired: its last answer was a
    /// `resource_limit` error (SPEC §13.1-a) and it sent nothing since.
    /// A worker that retires exits right after that answer; the parent
    /// learns it when the worker's stream ends
    /// ([`end_of_stream`](Self::end_of_stream)) or a write finds its stdin
    /// closed ([`write_failed`](Self::write_failed)). Either way the
    /// connection moves to [`SessionState::Retired`] and the request that
    /// met it fails with `worker_retired`: the same outcome whichever the
    /// parent notices first.
    pub fn may_have_retired(&self) -> bool {
        self.may_retire_after.is_some() && self.retired_after.is_none()
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
        self.check_not_retired()?;
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
    /// more captured bytes than the call allowed (nothing is written; see
    /// [`host_response_or_error`](Self::host_response_or_error) for the
    /// answer SPEC §16.1-g requires then).
    pub fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        let output_max = self.check_can_answer()?;
        if let Ok(outcome) = &result
            && let Some(over) = output_over_cap(outcome, output_max)
        {
            return Err(ProtocolError::invalid_use(over.message().to_owned()));
        }
        self.expect_silence("while its host call was pending")?;
        let bytes = self.session.host_response(result)?;
        self.outbox.push(bytes);
        Ok(())
    }

    /// Answer the pending host call, or, when that answer cannot be sent,
    /// an error record saying why, so that the guest always gets an answer:
    ///
    /// - an outcome whose `stdout` or `stderr` holds more captured bytes
    ///   than the call's `max_output_bytes` is answered with a
    ///   `resource_limit` error record (SPEC §16.1-f/g: output beyond the
    ///   cap fails the call with `resource_limit`);
    /// - an answer that cannot be encoded (an error record over its bounds,
    ///   …) is answered with an error record of its sub-kind's code.
    ///
    /// Returns [`Responded::WithError`] with the reason in both cases. The
    /// state errors of [`host_response`](Self::host_response) (nothing
    /// pending, poisoned, ended) are returned as they are.
    ///
    /// ```
    /// use quirl_lua_protocol::connection::Responded;
    /// use quirl_lua_protocol::records::{CommandOutcome, ErrorCode, HostCall, Operation, Policy, PolicySettings, WorkerFrame};
    /// use quirl_lua_protocol::{ParentConnection, ParentEvent, encode_worker_frame, frame_payload};
    ///
    /// let policy = Policy::new(PolicySettings { allow_process: true, ..Policy::quirl_config_profile().settings() })?;
    /// let mut parent = ParentConnection::new();
    /// parent.request(Operation::initialize(policy, None, true))?;
    /// parent.feed(&frame_payload(br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#)?)?;
    /// parent.poll_event()?;
    /// parent.request(Operation::Eval { source: "quirl.process.run('ls')".into() })?;
    /// let call = HostCall { request_id: 2, call_id: 1, command: "ls".into(), deadline_ms: 1000, max_output_bytes: 4 };
    /// parent.feed(&frame_payload(&encode_worker_frame(&WorkerFrame::HostCall { call })?)?)?;
    /// assert!(matches!(parent.poll_event()?, Some(ParentEvent::HostCall(_))));
    /// parent.take_outgoing();
    ///
    /// // Eleven bytes of stdout where the call allowed four: the guest gets
    /// // `resource_limit`, and the request goes on.
    /// let outcome = CommandOutcome { status: 0, stdout: Some("hello world".into()), stderr: None };
    /// let answered = parent.host_response_or_error(Ok(outcome))?;
    /// assert!(matches!(answered, Responded::WithError { .. }));
    /// let written = String::from_utf8_lossy(&parent.take_outgoing()[4..]).into_owned();
    /// assert!(written.contains(r#""code":"resource_limit""#));
    /// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
    /// ```
    pub fn host_response_or_error(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let output_max = self.check_can_answer()?;
        if let Ok(outcome) = &result
            && let Some(reason) = output_over_cap(outcome, output_max)
        {
            let record = ShellError::new(
                ErrorCode::ResourceLimit,
                "the command's output exceeded the host call's max_output_bytes",
            )
            .with_context(reason.message().to_owned());
            self.host_response(Err(record))?;
            return Ok(Responded::WithError { reason });
        }
        match self.host_response(result) {
            Ok(()) => Ok(Responded::AsGiven),
            Err(reason) if self.session.poison_cause().is_none() && !reason.is_invalid_use() => {
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
                    "the host could not send the command's answer",
                )
                .with_context(format!("protocol error: {}", reason.kind()))
                .with_context(detail);
                self.host_response(Err(record))?;
                Ok(Responded::WithError { reason })
            }
            Err(error) => Err(error),
        }
    }

    /// The pending call's `max_output_bytes`, or why no answer can be sent.
    fn check_can_answer(&self) -> Result<u64, ProtocolError> {
        self.session.check_alive()?;
        self.check_not_retired()?;
        if self.inbox.is_ended() {
            return Err(ended_error("worker"));
        }
        self.session.pending_output_max().ok_or_else(|| {
            ProtocolError::invalid_use("a host response without a pending host call")
        })
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
        self.check_not_retired()?;
        let payload = match self.inbox.next_payload() {
            Ok(Some(payload)) => payload,
            Ok(None) => return Ok(None),
            Err(error) => return Err(self.session.poison(error)),
        };
        // A frame after the answer: the worker did not retire.
        self.may_retire_after = None;
        let event = self.session.receive_payload(&payload)?;
        if let ParentEvent::Response {
            id,
            result: Err(record),
            ..
        } = &event
            && record.code == ErrorCode::ResourceLimit
        {
            self.may_retire_after = Some(*id);
        }
        Ok(Some(event))
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
    ///
    /// After a `resource_limit` answer (see
    /// [`may_have_retired`](Self::may_have_retired)) an end at a frame
    /// boundary is the worker's retirement (SPEC §13.1-b): the state
    /// becomes [`SessionState::Retired`], and with a request in flight the
    /// result is `worker_retired` (that request was not run), without
    /// poisoning.
    pub fn end_of_stream(&mut self) -> Result<(), ProtocolError> {
        self.session.check_alive()?;
        self.check_not_retired()?;
        if self.inbox.has_unread() {
            return Err(ProtocolError::invalid_use(
                "fed bytes were not polled yet; call poll_event until it returns None first",
            ));
        }
        if let Err(error) = self.inbox.finish() {
            return Err(self.session.poison(error));
        }
        if let Some(answered) = self.may_retire_after {
            self.retire(answered);
            return match self.session.in_flight() {
                None => Ok(()),
                Some((id, kind)) => Err(retired_error(answered)
                    .with_context(format!("request {id} ({}) was not run", kind.as_str()))),
            };
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

    /// Tell the connection that writing its outgoing bytes to the worker
    /// failed with `error`; returns the error to report.
    ///
    /// A closed pipe (`BrokenPipe`, `ConnectionReset`) while the worker
    /// [may have retired](Self::may_have_retired) is its retirement (SPEC
    /// §13.1-b): the connection becomes [`SessionState::Retired`], drops
    /// the unwritten bytes and returns `worker_retired`, as
    /// [`end_of_stream`](Self::end_of_stream) would have. Any other error
    /// is returned unchanged. The adapters call it on every failed write.
    pub fn write_failed(&mut self, error: ProtocolError) -> ProtocolError {
        let closed = error.io_error().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        });
        match self.may_retire_after {
            Some(answered) if closed && self.retired_after.is_none() => {
                self.retire(answered);
                retired_error(answered).with_context(format!("writing failed: {error}"))
            }
            _ => error,
        }
    }

    fn retire(&mut self, answered: u64) {
        self.retired_after = Some(answered);
        self.outbox.take();
    }

    /// `worker_retired` once the worker was found retired.
    fn check_not_retired(&self) -> Result<(), ProtocolError> {
        match self.retired_after {
            Some(answered) => Err(retired_error(answered)),
            None => Ok(()),
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

/// The captured-output bound of a host call (SPEC §9.3, §16.1-f): why
/// `outcome` does not fit, if it does not.
fn output_over_cap(outcome: &CommandOutcome, output_max: u64) -> Option<ProtocolError> {
    for (name, stream) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
        let captured = stream.as_deref().map_or(0, CommandOutcome::captured_bytes);
        if u64::try_from(captured).map_or(true, |bytes| bytes > output_max) {
            return Some(
                ProtocolError::domain(format!(
                    "{name} holds {captured} captured bytes; the host call allowed at most {output_max}"
                ))
                .with_context(format!("outcome.{name}")),
            );
        }
    }
    None
}

/// The retirement of SPEC §13.1-b, reported.
fn retired_error(answered: u64) -> ProtocolError {
    ProtocolError::new(
        ErrorKind::WorkerRetired,
        format!(
            "the worker retired after answering request {answered} with resource_limit (SPEC §13.1-b); start a new worker"
        ),
    )
}
