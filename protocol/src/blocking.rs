//! Blocking adapters: a connection of either role over `std::io` streams.
//!
//! [`ParentClient`] and [`WorkerClient`] own a connection, a reader and a
//! writer. Every byte read is fed to the connection, which keeps partial
//! frames and bytes that follow a frame, so nothing is lost between calls,
//! and a reader that returns `WouldBlock` (or `TimedOut`) mid-frame only
//! interrupts the call: the next call continues where it stopped. Writes
//! go through the connection's outgoing buffer, so an interrupted write is
//! resumed by [`flush`](ParentClient::flush) too.
//!
//! **Read deadlines.** `*_before(deadline)` variants wait for input with a
//! deadline; they need a reader that can wait for readability without
//! consuming bytes: [`WaitReadable`]. On Unix it is implemented with
//! `poll(2)` (through `rustix`) for the standard pipe, file, socket and
//! stdin types, and for any `AsFd` reader wrapped in [`PollReader`];
//! in-memory readers (`&[u8]`, `Cursor`) are always ready. A deadline that
//! passes is an `io_error` whose [`io_error`](ProtocolError::io_error) has
//! kind `TimedOut`; the connection is not poisoned.
//!
//! **Request deadlines.** [`ParentClient`] sends every request with the
//! time ([`ParentConnection::request_at`]), so the connection knows when
//! its answer is due (SPEC §10: the policy's `wall_time_ms` after sending,
//! host calls included). [`call`](ParentClient::call),
//! [`call_with_host`](ParentClient::call_with_host) and
//! [`next_event_before`](ParentClient::next_event_before) never wait past
//! it: when it passes, the connection becomes
//! [`Abandoned`](crate::SessionState::Abandoned), the error is
//! `deadline_passed` ([`is_timed_out`](ProtocolError::is_timed_out)), and
//! the worker must be killed (SPEC §13.2; the process side is the host's).
//! [`next_event`](ParentClient::next_event), for readers that cannot wait,
//! blocks without a deadline.
//!
//! **Typed calls.** [`call`](ParentClient::call) and
//! [`call_with_host`](ParentClient::call_with_host) take any
//! [`TypedOperation`]: `call(Eval::new("return 1"))` answers with a
//! `serde_json::Value`, `call(LoadConfig { .. })` with a `QuirlConfig`, and
//! so on (see [`crate::operations`]); a plain [`Operation`] answers with
//! the [`OperationResult`] the session
//! checked.
//!
//! **Cancellation.** [`ParentClient::canceller`] (Unix) hands out a
//! [`Canceller`] another thread uses to end a blocked call at once: the
//! client `poll(2)`s a pipe of the canceller together with the worker's
//! stream, so no time slices are needed. A host whose cancellation is its
//! own `Arc<AtomicBool>` (or any predicate) hands it to
//! [`cancel_on`](ParentClient::cancel_on) instead: the client then looks at
//! it at every wake-up and at least every
//! [`CANCEL_CHECK_INTERVAL`](crate::cancellation::CANCEL_CHECK_INTERVAL)
//! while it waits. Either way a cancelled client is
//! [`Abandoned`](crate::SessionState::Abandoned) with `cancelled`.
//!
//! **Hosts that drive their own loop** ([`request`](ParentClient::request),
//! [`next_event_before`](ParentClient::next_event_before),
//! [`host_response`](ParentClient::host_response)) get the same deadline:
//! `host_response` refuses with `deadline_passed` (nothing written) once
//! the request's deadline passed while the host ran the command, and
//! [`check_deadline`](ParentClient::check_deadline) asks the same question
//! at any time. When a write fails because the worker had already given
//! up (a closed pipe), [`explain_write_failure`](ParentClient::explain_write_failure)
//! reads what the worker sent before it went (an oversized frame, a
//! malformed one) and reports that violation instead; `call` and
//! `call_with_host` do it themselves.
//!
//! The deadline covers waiting for bytes, not writing: a worker that never
//! reads its stdin can block a write of more than a pipe buffer. Hosts that
//! must bound writes too use non-blocking descriptors with the sans-IO
//! connection directly, or the `tokio` adapter.

mod cancel;
mod frame_reader;
mod wait;

#[cfg(unix)]
pub use cancel::Canceller;
pub use frame_reader::FrameReader;
#[cfg(unix)]
pub use wait::PollReader;
pub use wait::WaitReadable;

use crate::cancellation::Cancellation;
use crate::connection::{HostCommand, ParentConnection, Responded, WorkerConnection, WorkerEvent};
use crate::error::{ErrorKind, ProtocolError};
use crate::operations::TypedOperation;
use crate::records::{CommandOutcome, HostCall, Operation, OperationResult, ShellError};
use crate::session::ParentEvent;
use cancel::CancelSignal;
use serde_json::Value;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};
use wait::{Cancel, Wait, read_deadline_passed, wait_for_input, wait_until};

/// Bytes of the worker's stream read at most after a failed write, when
/// looking for the violation that explains it: a whole frame and its
/// header, the most a worker can have written that the session judges.
const EXPLAIN_BYTES_MAX: usize = crate::limits::FRAME_BYTES_MAX + 4;

/// Bytes read from the stream per `read` call at most.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Read once into `buffer`; `Interrupted` is retried.
fn read_some<R: Read>(reader: &mut R, buffer: &mut [u8]) -> Result<usize, ProtocolError> {
    loop {
        match reader.read(buffer) {
            Ok(read) => return Ok(read),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ProtocolError::io("reading frames", error)),
        }
    }
}

macro_rules! client_io {
    ($connection:ident, $event:ty) => {
        /// The connection, read-only (state, in-flight request, poison cause).
        pub fn connection(&self) -> &$connection {
            &self.connection
        }

        /// The reader (e.g. to signal or inspect the underlying stream).
        pub fn reader(&self) -> &R {
            &self.reader
        }

        /// The writer.
        pub fn writer(&self) -> &W {
            &self.writer
        }

        /// The writer, mutably; dropping what it wraps (e.g. a child's
        /// stdin) is how a parent ends the session, see [`Self::into_parts`].
        pub fn writer_mut(&mut self) -> &mut W {
            &mut self.writer
        }

        /// Split into the connection and the streams.
        pub fn into_parts(self) -> ($connection, R, W) {
            (self.connection, self.reader, self.writer)
        }

        /// Write every pending outgoing byte and flush. After an error
        /// (e.g. `WouldBlock`) the unwritten rest stays pending; call again.
        pub fn flush(&mut self) -> Result<(), ProtocolError> {
            while !self.connection.outgoing().is_empty() {
                match self.writer.write(self.connection.outgoing()) {
                    Ok(0) => {
                        return Err(ProtocolError::io(
                            "writing frames",
                            io::Error::new(
                                io::ErrorKind::WriteZero,
                                "the stream accepted no bytes",
                            ),
                        ));
                    }
                    Ok(written) => self.connection.consume_outgoing(written),
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(ProtocolError::io("writing frames", error)),
                }
            }
            self.writer
                .flush()
                .map_err(|error| ProtocolError::io("flushing frames", error))
        }

        /// The next event; `Ok(None)` at a clean end of stream (SPEC §9.5).
        /// Blocks until a frame is complete. Outgoing bytes still pending
        /// (a send interrupted by `WouldBlock`) are written first: the peer
        /// answers only what it received.
        pub fn next_event(&mut self) -> Result<Option<$event>, ProtocolError> {
            self.send_pending()?;
            loop {
                if let Some(event) = self.connection.poll_event()? {
                    return Ok(Some(event));
                }
                if self.connection.is_ended() {
                    return Ok(None);
                }
                let read = read_some(&mut self.reader, &mut self.buffer)?;
                if read == 0 {
                    self.connection.end_of_stream()?;
                    return Ok(None);
                }
                self.connection.feed(&self.buffer[..read])?;
            }
        }
    };
}

macro_rules! client_deadline {
    ($event:ty) => {
        /// [`next_event`](Self::next_event) that waits for input until
        /// `deadline` at most; then fails with an `io_error` of kind
        /// `TimedOut` without poisoning (bytes received so far are kept).
        pub fn next_event_before(
            &mut self,
            deadline: Instant,
        ) -> Result<Option<$event>, ProtocolError> {
            self.send_pending()?;
            loop {
                if let Some(event) = self.connection.poll_event()? {
                    return Ok(Some(event));
                }
                if self.connection.is_ended() {
                    return Ok(None);
                }
                wait_until(&mut self.reader, deadline)?;
                let read = read_some(&mut self.reader, &mut self.buffer)?;
                if read == 0 {
                    self.connection.end_of_stream()?;
                    return Ok(None);
                }
                self.connection.feed(&self.buffer[..read])?;
            }
        }
    };
}

/// A blocking parent: requests written to `W` (the worker's stdin),
/// frames read from `R` (the worker's stderr, SPEC §3.1).
///
/// Every request is sent with the time, so the connection keeps its
/// deadline (SPEC §10); `call`, `call_with_host` and `next_event_before`
/// never wait past it (see the [module docs](self)).
///
/// ```no_run
/// use quirl_lua_protocol::blocking::ParentClient;
/// use quirl_lua_protocol::operations::{Eval, Initialize};
/// use quirl_lua_protocol::records::Policy;
/// use std::os::unix::process::CommandExt;
/// use std::process::{Command, Stdio};
///
/// // SPEC §3.1: stdin and stderr piped, stdout the null device, a process
/// // group of its own, a cleared environment.
/// let mut child = Command::new("/usr/local/bin/quirl-worker")
///     .stdin(Stdio::piped())
///     .stdout(Stdio::null())
///     .stderr(Stdio::piped())
///     .env_clear()
///     .process_group(0)
///     .spawn()?;
/// let (Some(stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
///     unreachable!("both are piped");
/// };
/// let mut worker = ParentClient::new(stderr, stdin);
/// worker.call(Initialize::new(Policy::quirl_config_profile()))??;
/// let answer = worker.call(Eval::new("return 6 * 7"))??;
/// assert_eq!(answer, 42);
/// drop(worker); // closes stdin: the worker exits 0
/// child.wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ParentClient<R, W> {
    connection: ParentConnection,
    reader: R,
    writer: W,
    buffer: Box<[u8]>,
    cancel: Option<CancelSignal>,
    watch: Option<Cancellation>,
}

impl<R: Read, W: Write> ParentClient<R, W> {
    /// A client for a freshly spawned worker.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: ParentConnection::new(),
            reader,
            writer,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            cancel: None,
            watch: None,
        }
    }

    client_io!(ParentConnection, ParentEvent);

    /// Bound `initialize` by `timeout` (see
    /// [`ParentConnection::set_startup_timeout`]).
    pub fn set_startup_timeout(&mut self, timeout: Duration) {
        self.connection.set_startup_timeout(timeout);
    }

    /// A handle that cancels this client's calls from another thread
    /// (see [`Canceller`]); the same handle every time. Fails only if no
    /// pipe can be created.
    #[cfg(unix)]
    pub fn canceller(&mut self) -> io::Result<Canceller> {
        if let Some(signal) = &self.cancel {
            return Ok(signal.handle.clone());
        }
        let signal = CancelSignal::new()?;
        let handle = signal.handle.clone();
        self.cancel = Some(signal);
        Ok(handle)
    }

    /// Cancel this client's calls once `cancellation` holds: a host's own
    /// `Arc<AtomicBool>` (`cancel_on(Arc::clone(&flag))`) or a predicate
    /// ([`Cancellation::when`]). It replaces one set before; the
    /// [`Canceller`] of [`canceller`](Self::canceller) stays in force too.
    ///
    /// It is checked before every send, after every host callback, and
    /// while a call waits for the worker at every wake-up and at least
    /// every [`CANCEL_CHECK_INTERVAL`](crate::cancellation::CANCEL_CHECK_INTERVAL),
    /// so a blocked call ends within that interval of the flag being set
    /// (plus the scheduler's delay): `cancelled`, the connection
    /// [`Abandoned`](crate::SessionState::Abandoned), the worker to be
    /// killed (SPEC §13.2). A host callback that is running is not
    /// interrupted; the call fails when it returns.
    ///
    /// ```no_run
    /// # use quirl_lua_protocol::blocking::ParentClient;
    /// use quirl_lua_protocol::operations::Eval;
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// # fn demo(worker: &mut ParentClient<std::process::ChildStderr, std::process::ChildStdin>) {
    /// let interrupted = Arc::new(AtomicBool::new(false)); // e.g. set by a Ctrl-C handler
    /// worker.cancel_on(Arc::clone(&interrupted));
    /// let stop = Arc::clone(&interrupted);
    /// std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(50));
    ///     stop.store(true, Ordering::Release);
    /// });
    /// let error = worker.call(Eval::new("while true do end")).unwrap_err();
    /// assert!(error.is_cancelled());
    /// # }
    /// ```
    pub fn cancel_on(&mut self, cancellation: impl Into<Cancellation>) {
        self.watch = Some(cancellation.into());
    }

    /// What ends a wait besides input and the deadline.
    fn cancel_sources(&self) -> Cancel<'_> {
        Cancel {
            signal: self.cancel.as_ref(),
            watch: self.watch.as_ref(),
        }
    }

    /// `cancelled` (the connection abandoned) once the canceller fired or
    /// the watched cancellation holds.
    fn check_cancelled(&mut self) -> Result<(), ProtocolError> {
        if self.cancel_sources().is_cancelled() {
            return Err(self.connection.cancel());
        }
        Ok(())
    }

    /// For hosts that drive their own loop: `Ok` while the client may go on,
    /// else the error that ends the request — `cancelled` once a
    /// cancellation holds, `deadline_passed` once the deadline of the
    /// request in flight has passed (SPEC §10, host calls included); either
    /// way the connection is [`Abandoned`](crate::SessionState::Abandoned)
    /// and the worker must be killed (SPEC §13.2). Call it after a host
    /// callback returns, before answering; [`host_response`](Self::host_response)
    /// and [`host_response_or_error`](Self::host_response_or_error) call it
    /// themselves, so no answer is sent past the deadline.
    pub fn check_deadline(&mut self) -> Result<(), ProtocolError> {
        self.check_cancelled()?;
        self.connection.handle_timeout(Instant::now())
    }

    /// [`flush`](Self::flush), with a failed write judged by the
    /// connection (a worker that retired, SPEC §13.1-b).
    fn send_pending(&mut self) -> Result<(), ProtocolError> {
        if self.connection.outgoing().is_empty() {
            return Ok(());
        }
        let flushed = self.flush();
        flushed.map_err(|error| self.connection.write_failed(error))
    }

    /// Send `operation` as the next request and write it; returns its id.
    /// The connection keeps its deadline from now
    /// ([`ParentConnection::request_at`]). Refused with `cancelled` once
    /// the [`Canceller`] fired.
    pub fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        self.check_cancelled()?;
        let id = self.connection.request_at(operation, Instant::now())?;
        self.send_pending()?;
        Ok(id)
    }

    /// Answer the pending host call and write the answer. Refused with
    /// `deadline_passed` or `cancelled`, nothing written, when
    /// [`check_deadline`](Self::check_deadline) says the request is over
    /// (the host ran its command past the request's deadline).
    pub fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.check_deadline()?;
        self.connection.host_response(result)?;
        self.send_pending()
    }

    /// Answer the pending host call, or with an error record when the
    /// answer cannot be sent (see
    /// [`ParentConnection::host_response_or_error`]), and write it;
    /// refused like [`host_response`](Self::host_response) once the
    /// request's deadline passed.
    pub fn host_response_or_error(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_deadline()?;
        let responded = self.connection.host_response_or_error(result)?;
        self.send_pending()?;
        Ok(responded)
    }
}

impl<R: Read + WaitReadable, W: Write> ParentClient<R, W> {
    /// [`next_event`](Self::next_event) that waits for input until
    /// `deadline` at most, and never past the deadline of the request in
    /// flight ([`ParentConnection::next_deadline`]) nor a cancellation:
    ///
    /// - `deadline` passes first: an `io_error` of kind `TimedOut`, not
    ///   poisoned, bytes received so far kept (a read deadline of the
    ///   caller's, [`is_timed_out`](ProtocolError::is_timed_out));
    /// - the request's deadline passes: `deadline_passed`
    ///   ([`is_timed_out`](ProtocolError::is_timed_out) too), the
    ///   connection [`Abandoned`](crate::SessionState::Abandoned), the
    ///   worker to be killed (SPEC §10, §13.2);
    /// - the [`Canceller`] fires or the watched
    ///   [`Cancellation`] holds: `cancelled`, abandoned likewise.
    ///
    /// Bytes still to be written go first; a failed write is explained as
    /// [`explain_write_failure`](Self::explain_write_failure) does.
    pub fn next_event_before(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<ParentEvent>, ProtocolError> {
        self.next_event_within(Some(deadline))
    }

    fn next_event_within(
        &mut self,
        read_deadline: Option<Instant>,
    ) -> Result<Option<ParentEvent>, ProtocolError> {
        self.check_cancelled()?;
        self.send_explained()?;
        loop {
            if let Some(event) = self.connection.poll_event()? {
                return Ok(Some(event));
            }
            if self.connection.is_ended() {
                return Ok(None);
            }
            let due = self.connection.next_deadline();
            let until = match (due, read_deadline) {
                (Some(due), Some(read)) => Some(due.min(read)),
                (due, read) => due.or(read),
            };
            let cancel = Cancel {
                signal: self.cancel.as_ref(),
                watch: self.watch.as_ref(),
            };
            match wait_for_input(&mut self.reader, until, cancel)? {
                Wait::Readable => {}
                Wait::Cancelled => return Err(self.connection.cancel()),
                Wait::Passed => {
                    self.connection.handle_timeout(Instant::now())?;
                    return Err(read_deadline_passed());
                }
            }
            let read = read_some(&mut self.reader, &mut self.buffer)?;
            if read == 0 {
                self.connection.end_of_stream()?;
                return Ok(None);
            }
            self.connection.feed(&self.buffer[..read])?;
        }
    }

    /// [`flush`](Self::flush) what is pending, a failed write explained by
    /// what the worker sent ([`explain_write_failure`](Self::explain_write_failure)).
    fn send_explained(&mut self) -> Result<(), ProtocolError> {
        match self.send_pending() {
            Ok(()) => Ok(()),
            Err(error) => Err(self.explain_write_failure(error)),
        }
    }

    /// After a write to the worker failed with `error`: the violation the
    /// worker had already committed when that explains the failure, else
    /// `error` unchanged.
    ///
    /// A worker that finds a violation in what it read, or that sends one
    /// (an oversized frame header, a malformed frame), stops reading and
    /// exits; the parent's next write then fails with a closed pipe,
    /// although the worker's last bytes — the real cause — are already in
    /// its stream. This reads what is there without waiting (at most a
    /// frame's worth), feeds it to the connection and, when the
    /// connection judges it a violation (or a stream cut mid-frame),
    /// returns that error, poisoned, with the write error as context.
    /// Only an `io_error` is looked into; `worker_retired` and other
    /// verdicts of the connection are returned as they are.
    /// [`call`](Self::call), [`call_with_host`](Self::call_with_host) and
    /// [`next_event_before`](Self::next_event_before) do this themselves;
    /// a host that drives its own loop calls it when
    /// [`request`](Self::request) or [`host_response`](Self::host_response)
    /// fails.
    pub fn explain_write_failure(&mut self, error: ProtocolError) -> ProtocolError {
        if error.kind() != ErrorKind::IoError {
            return error;
        }
        let explained =
            |cause: ProtocolError| cause.with_context(format!("writing failed: {error}"));
        let mut budget = EXPLAIN_BYTES_MAX;
        loop {
            match self.connection.poll_event() {
                Err(cause) => return explained(cause),
                Ok(Some(_)) => continue,
                Ok(None) => {}
            }
            if budget == 0 || self.connection.is_ended() {
                return error;
            }
            match self.reader.wait_readable(Duration::ZERO) {
                Ok(true) => {}
                Ok(false) | Err(_) => return error,
            }
            let chunk = budget.min(self.buffer.len());
            let Ok(read) = read_some(&mut self.reader, &mut self.buffer[..chunk]) else {
                return error;
            };
            if read == 0 {
                // A stream cut inside a frame, or ended mid-request: the
                // worker went away, which explains the write.
                return match self.connection.end_of_stream() {
                    Err(cause) => explained(cause),
                    Ok(()) => error,
                };
            }
            budget -= read;
            if let Err(cause) = self.connection.feed(&self.buffer[..read]) {
                return explained(cause);
            }
        }
    }

    /// Send `operation` and wait for its response, answering host calls
    /// with `host` on the way, all under the request's deadline (SPEC §10:
    /// the policy's `wall_time_ms` from sending, host calls included;
    /// `deadline_ms` for `plugin_command`, the startup timeout for
    /// `initialize`). `Ok(Err(record))` is the worker's error response;
    /// `Ok(Ok(output))` its result, typed by the operation
    /// ([`TypedOperation`]); `Err` is a protocol, I/O, deadline, cancellation
    /// or usage failure.
    ///
    /// When the deadline passes, while waiting or while `host` ran (it is
    /// not interrupted: bound it by the call's `deadline_ms`), the call
    /// fails with `deadline_passed` and the connection is
    /// [`Abandoned`](crate::SessionState::Abandoned): kill the worker
    /// (SPEC §13.2). A [`Canceller`] or a watched [`Cancellation`]
    /// ([`cancel_on`](Self::cancel_on)) ends it with `cancelled` likewise.
    ///
    /// Host answers go through
    /// [`host_response_or_error`](Self::host_response_or_error): an outcome
    /// over the call's `max_output_bytes` reaches the guest as a
    /// `resource_limit` error (SPEC §16.1-g), and the request goes on. A
    /// worker that retired after its previous answer (SPEC §13.1-b) fails
    /// the call with `worker_retired`, whether its exit is noticed by the
    /// write or by the read; a write that fails because the worker had
    /// already committed a violation reports that violation
    /// ([`explain_write_failure`](Self::explain_write_failure)).
    // The error record is the wire's own type (SPEC §6.9); boxing it here
    // would only differ from every other answer path.
    #[allow(clippy::result_large_err)]
    pub fn call_with_host<O: TypedOperation>(
        &mut self,
        operation: O,
        mut host: impl FnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<O::Output, ShellError>, ProtocolError> {
        self.check_cancelled()?;
        self.connection
            .request_at(operation.into_operation(), Instant::now())?;
        self.send_explained()?;
        loop {
            match self.next_event_within(None)? {
                Some(ParentEvent::Response { result, .. }) => {
                    return match result {
                        Ok(result) => O::output(result).map(Ok),
                        Err(record) => Ok(Err(record)),
                    };
                }
                Some(ParentEvent::HostCall(call)) => {
                    let answer = host(&call);
                    // The host call's time counts (SPEC §10).
                    self.check_deadline()?;
                    self.connection.host_response_or_error(answer)?;
                    self.send_explained()?;
                }
                None => {
                    // `next_event` returns `None` only with nothing in flight.
                    return Err(ProtocolError::invalid_use(
                        "the worker's stream ended before the response",
                    ));
                }
            }
        }
    }

    /// [`call_with_host`](Self::call_with_host) for a host that runs no
    /// processes: every host call is answered with an `invalid_command`
    /// error record. (Host calls only arrive if `initialize` enabled them.)
    ///
    /// `call(Eval::new("return 1"))` answers with a `serde_json::Value`,
    /// `call(Operation::Eval { .. })` with an [`OperationResult`]; see
    /// [`crate::operations`].
    #[allow(clippy::result_large_err)]
    pub fn call<O: TypedOperation>(
        &mut self,
        operation: O,
    ) -> Result<Result<O::Output, ShellError>, ProtocolError> {
        self.call_with_host(operation, |_| {
            Err(ShellError::new(
                crate::records::ErrorCode::InvalidCommand,
                "this host runs no processes",
            ))
        })
    }
}

/// A blocking worker: requests read from `R` (stdin), frames written to
/// `W` (stderr, SPEC §3.1).
///
/// See `examples/worker.rs` for a complete worker.
#[derive(Debug)]
pub struct WorkerClient<R, W> {
    connection: WorkerConnection,
    reader: R,
    writer: W,
    buffer: Box<[u8]>,
}

impl<R: Read, W: Write> WorkerClient<R, W> {
    /// A client awaiting `initialize`.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: WorkerConnection::new(),
            reader,
            writer,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    client_io!(WorkerConnection, WorkerEvent);

    /// [`flush`](Self::flush) when bytes are pending.
    fn send_pending(&mut self) -> Result<(), ProtocolError> {
        if self.connection.outgoing().is_empty() {
            return Ok(());
        }
        self.flush()
    }

    /// Answer the request in flight and write the answer (see
    /// [`WorkerConnection::respond`]).
    pub fn respond(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.connection.respond(result)?;
        self.flush()
    }

    /// Answer, or fall back to an error record (see
    /// [`WorkerConnection::respond_or_error`]), and write it.
    pub fn respond_or_error(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let responded = self.connection.respond_or_error(result)?;
        self.flush()?;
        Ok(responded)
    }

    /// [`respond_or_error`](Self::respond_or_error) for a JSON result.
    pub fn respond_json_or_error(
        &mut self,
        result: Result<Value, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let responded = self.connection.respond_json_or_error(result)?;
        self.flush()?;
        Ok(responded)
    }

    /// Send a host call, write it, and wait for its host response.
    pub fn host_call(
        &mut self,
        call: HostCommand,
    ) -> Result<Result<CommandOutcome, ShellError>, ProtocolError> {
        self.connection.host_call(call)?;
        self.flush()?;
        match self.next_event()? {
            Some(WorkerEvent::HostResponse(response)) => Ok(response.result),
            // The session accepts nothing but the host response now, and
            // `next_event` ends only at a clean end, which a pending call
            // rules out; kept total for a future event kind.
            _ => Err(ProtocolError::invalid_use(
                "no host response arrived for the host call",
            )),
        }
    }
}

impl<R: Read + WaitReadable, W: Write> WorkerClient<R, W> {
    client_deadline!(WorkerEvent);
}
