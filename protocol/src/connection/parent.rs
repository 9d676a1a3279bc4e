//! The parent's connection: requests and host responses out, responses and
//! host calls in.

use super::worker::FALLBACK_CONTEXT_BYTES_MAX;
use super::{FrameInbox, Outbox, Responded, ended_error};
use crate::error::{ErrorKind, ProtocolError};
use crate::records::{CommandOutcome, ErrorCode, Operation, OperationKind, ShellError};
use crate::session::{ParentEvent, ParentSession, SessionState};
use std::time::{Duration, Instant};

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
#[derive(Debug)]
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
    /// The budget of `initialize`, which runs no guest code (SPEC §10).
    startup_timeout: Duration,
    /// The policy's `wall_time_ms`, fixed by the `initialize` sent.
    wall_time: Option<Duration>,
    /// The deadline of the last request sent with a clock.
    deadline: Option<Deadline>,
    /// Why the parent gave the session up (deadline or cancellation).
    abandoned: Option<ProtocolError>,
}

/// When a request was sent and when its answer is due (SPEC §10).
#[derive(Debug, Clone, Copy)]
struct Deadline {
    id: u64,
    sent: Instant,
    at: Instant,
}

impl Default for ParentConnection {
    fn default() -> Self {
        Self {
            session: ParentSession::default(),
            inbox: FrameInbox::default(),
            outbox: Outbox::default(),
            may_retire_after: None,
            retired_after: None,
            startup_timeout: Self::DEFAULT_STARTUP_TIMEOUT,
            wall_time: None,
            deadline: None,
            abandoned: None,
        }
    }
}

impl ParentConnection {
    /// The budget of `initialize` unless
    /// [`set_startup_timeout`](Self::set_startup_timeout) says otherwise:
    /// 5 s, the reference parent's startup timeout (SPEC §10).
    pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

    /// A connection to a freshly spawned worker; the first request must be
    /// `initialize`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound `initialize` by `timeout` from its sending instead of
    /// [`DEFAULT_STARTUP_TIMEOUT`](Self::DEFAULT_STARTUP_TIMEOUT). It runs
    /// no guest code, so the policy's `wall_time_ms` does not apply to it
    /// (SPEC §10). Takes effect for an `initialize` sent afterwards.
    pub fn set_startup_timeout(&mut self, timeout: Duration) {
        self.startup_timeout = timeout;
    }

    /// The budget of `initialize` (see
    /// [`set_startup_timeout`](Self::set_startup_timeout)).
    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout
    }

    /// The session state; [`SessionState::Retired`] once the worker was
    /// found retired (SPEC §13.1-b), [`SessionState::Abandoned`] once the
    /// parent gave the request in flight up (its deadline passed, or it
    /// was cancelled).
    pub fn state(&self) -> SessionState {
        if self.abandoned.is_some() {
            return SessionState::Abandoned;
        }
        if self.retired_after.is_some() {
            return SessionState::Retired;
        }
        self.session.state()
    }

    /// Whether the worker must be killed now (SPEC §13.2): the session was
    /// abandoned (a deadline passed, a cancellation) or poisoned (a
    /// violation, a stream cut mid-request). The process side is the
    /// caller's: stop writing and close the worker's stdin, kill its
    /// process group, reap it, drain its stream. A retired worker
    /// ([`SessionState::Retired`]) exited by itself; it is only reaped.
    pub fn must_kill(&self) -> bool {
        matches!(
            self.state(),
            SessionState::Abandoned | SessionState::Poisoned
        )
    }

    /// The request in flight: its id and operation (none once retired: the
    /// request that met the retirement was not run; none once abandoned:
    /// no answer is awaited any more).
    pub fn in_flight(&self) -> Option<(u64, OperationKind)> {
        if self.retired_after.is_some() || self.abandoned.is_some() {
            return None;
        }
        self.session.in_flight()
    }

    /// When the answer to the request in flight is due: `wall_time_ms` of
    /// the policy after the request was sent (`deadline_ms` for
    /// `plugin_command`, the startup timeout for `initialize`), host calls
    /// included (SPEC §10). `None` with nothing in flight, for a request
    /// sent without a clock ([`request`](Self::request)), and once the
    /// session is over (abandoned, poisoned, retired, ended).
    ///
    /// A host that drives the connection itself waits for the worker's
    /// bytes until this instant at most, then calls
    /// [`handle_timeout`](Self::handle_timeout).
    pub fn next_deadline(&self) -> Option<Instant> {
        let (id, _) = self.in_flight()?;
        if self.session.poison_cause().is_some() || self.inbox.is_ended() {
            return None;
        }
        self.deadline
            .filter(|deadline| deadline.id == id)
            .map(|deadline| deadline.at)
    }

    /// Tell the connection the time: `Ok` while the request in flight (if
    /// any) is within its deadline ([`next_deadline`](Self::next_deadline)).
    /// At or after the deadline the parent gives the request up (SPEC §10,
    /// §13.2): the state becomes [`SessionState::Abandoned`], unwritten
    /// bytes are dropped, and the result is a `deadline_passed` error
    /// ([`is_timed_out`](ProtocolError::is_timed_out)); the worker must be
    /// killed ([`must_kill`](Self::must_kill)) and every later call is
    /// refused with `deadline_passed`. Bytes fed but not polled yet are not
    /// looked at: poll them first if an answer that arrived in time should
    /// win.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtocolError> {
        self.check_not_abandoned()?;
        let Some(at) = self.next_deadline() else {
            return Ok(());
        };
        if now < at {
            return Ok(());
        }
        let (id, kind) = self.in_flight().unwrap_or((0, OperationKind::Eval));
        let budget = self.deadline.map_or(Duration::ZERO, |deadline| {
            deadline.at.saturating_duration_since(deadline.sent)
        });
        let error = ProtocolError::new(
            ErrorKind::DeadlinePassed,
            format!(
                "request {id} ({}) passed its deadline, {} ms after it was sent, host calls included (SPEC §10); kill the worker (SPEC §13.2)",
                kind.as_str(),
                budget.as_millis()
            ),
        );
        Err(self.abandon(error))
    }

    /// Give the session up on the host's behalf (a user's interrupt, a
    /// shutdown): the state becomes [`SessionState::Abandoned`], unwritten
    /// bytes are dropped, and the worker must be killed (SPEC §13.2,
    /// [`must_kill`](Self::must_kill)). Returns the `cancelled` error to
    /// report (SPEC §11.3: `resource_limit`); every later call is refused
    /// with it. On a session already over (poisoned, retired, abandoned)
    /// nothing changes and the error that ended it is returned.
    pub fn cancel(&mut self) -> ProtocolError {
        if let Err(error) = self.session.check_alive() {
            return error;
        }
        if let Err(error) = self.check_not_abandoned() {
            return error;
        }
        if let Some(answered) = self.retired_after {
            return retired_error(answered);
        }
        let what = match self.in_flight() {
            Some((id, kind)) => format!("request {id} ({})", kind.as_str()),
            None => "the session".to_owned(),
        };
        let error = ProtocolError::new(
            ErrorKind::Cancelled,
            format!("the parent cancelled {what}; kill the worker (SPEC §13.2)"),
        );
        self.abandon(error)
    }

    fn abandon(&mut self, error: ProtocolError) -> ProtocolError {
        self.abandoned = Some(error.clone());
        self.outbox.take();
        error
    }

    /// The refusal once the session was abandoned: the cause's kind.
    fn check_not_abandoned(&self) -> Result<(), ProtocolError> {
        match &self.abandoned {
            Some(cause) => Err(ProtocolError::new(
                cause.kind(),
                "the session was abandoned earlier; kill the worker and start a new one (SPEC §13.2)",
            )
            .with_context(cause.message().to_owned())),
            None => Ok(()),
        }
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
    ///
    /// The connection is given no clock here, so it knows no deadline for
    /// this request ([`next_deadline`](Self::next_deadline) is `None`);
    /// hosts that let the connection keep the deadline of SPEC §10 send
    /// with [`request_at`](Self::request_at).
    pub fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        self.send_request(operation, None)
    }

    /// [`request`](Self::request), sent at `now`: the connection keeps the
    /// request's deadline (SPEC §10), `now` plus the policy's
    /// `wall_time_ms` (`deadline_ms` for `plugin_command`, the
    /// [startup timeout](Self::set_startup_timeout) for `initialize`); see
    /// [`next_deadline`](Self::next_deadline) and
    /// [`handle_timeout`](Self::handle_timeout).
    ///
    /// ```
    /// use quirl_lua_protocol::records::{Operation, Policy};
    /// use quirl_lua_protocol::{ParentConnection, SessionState};
    /// use std::time::{Duration, Instant};
    ///
    /// let mut connection = ParentConnection::new();
    /// let sent = Instant::now();
    /// connection.request_at(Operation::initialize(Policy::quirl_config_profile(), None, false), sent)?;
    /// let due = sent + ParentConnection::DEFAULT_STARTUP_TIMEOUT;
    /// assert_eq!(connection.next_deadline(), Some(due));
    /// connection.handle_timeout(due - Duration::from_millis(1))?; // still in time
    /// let late = connection.handle_timeout(due).unwrap_err();
    /// assert!(late.is_timed_out());
    /// assert_eq!(connection.state(), SessionState::Abandoned);
    /// assert!(connection.must_kill());
    /// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
    /// ```
    pub fn request_at(&mut self, operation: Operation, now: Instant) -> Result<u64, ProtocolError> {
        let budget = match &operation {
            Operation::Initialize { .. } => Some(self.startup_timeout),
            Operation::PluginCommand { deadline_ms, .. } => {
                Some(Duration::from_millis(*deadline_ms))
            }
            _ => self.wall_time,
        };
        let at = budget.map(|budget| {
            let due = now.checked_add(budget).or_else(|| now.checked_add(YEAR));
            (now, due.unwrap_or(now))
        });
        self.send_request(operation, at)
    }

    /// [`request`](Self::request), sent at `now`, due at `deadline`
    /// instead of the policy's budget (a host's own, shorter deadline, or
    /// a callback's deadline, DESIGN §17.6).
    pub fn request_with_deadline(
        &mut self,
        operation: Operation,
        now: Instant,
        deadline: Instant,
    ) -> Result<u64, ProtocolError> {
        self.send_request(operation, Some((now, deadline.max(now))))
    }

    fn send_request(
        &mut self,
        operation: Operation,
        timing: Option<(Instant, Instant)>,
    ) -> Result<u64, ProtocolError> {
        self.session.check_alive()?;
        self.check_not_abandoned()?;
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
        let wall_time = match &operation {
            Operation::Initialize { policy, .. } => {
                Some(Duration::from_millis(policy.wall_time_ms()))
            }
            _ => None,
        };
        let (id, bytes) = self.session.request(operation)?;
        self.outbox.push(bytes);
        if wall_time.is_some() {
            self.wall_time = wall_time;
        }
        self.deadline = timing.map(|(sent, at)| Deadline { id, sent, at });
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
        self.check_not_abandoned()?;
        self.check_not_retired()?;
        if self.inbox.is_ended() {
            return Err(ended_error("worker"));
        }
        self.session.pending_output_max().ok_or_else(|| {
            ProtocolError::invalid_use("a host response without a pending host call")
        })
    }

    /// Give the connection bytes read from the worker (any chunking).
    /// `invalid_use` after [`end_of_stream`](Self::end_of_stream). Once
    /// the session is [abandoned](SessionState::Abandoned) the bytes are
    /// dropped: draining the killed worker's stream (SPEC §13.2 step 4)
    /// may feed them or not.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.abandoned.is_some() {
            return Ok(());
        }
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
        self.check_not_abandoned()?;
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
        self.check_not_abandoned()?;
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
            Some(answered)
                if closed && self.retired_after.is_none() && self.abandoned.is_none() =>
            {
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

/// A deadline beyond any `Instant` arithmetic: about a year.
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// The retirement of SPEC §13.1-b, reported.
fn retired_error(answered: u64) -> ProtocolError {
    ProtocolError::new(
        ErrorKind::WorkerRetired,
        format!(
            "the worker retired after answering request {answered} with resource_limit (SPEC §13.1-b); start a new worker"
        ),
    )
}
