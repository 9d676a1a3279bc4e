//! Async adapters (feature `tokio`): a connection of either role over
//! tokio's `AsyncRead`/`AsyncWrite`.
//!
//! The same shape as [`crate::blocking`]: every byte read is fed to the
//! connection at once, so partial frames and bytes after a frame survive
//! between calls. `next_event` and `flush` are **cancel-safe**: dropping
//! their future (for example when a `tokio::time::timeout` or a `select!`
//! branch wins) loses no byte: a read either completed and was fed, or
//! read nothing; written bytes are consumed as each write completes.
//! `next_event_before(deadline)` wraps exactly that; its name and its
//! `std::time::Instant` are those of the blocking adapter.
//!
//! **Typed calls.** [`call`](ParentClient::call),
//! [`call_with_host`](ParentClient::call_with_host) and
//! [`call_with_host_before`](ParentClient::call_with_host_before) take any
//! [`TypedOperation`] (see [`crate::operations`]): `call(Eval::new(…))`
//! answers with a `serde_json::Value`, a plain
//! [`Operation`] with the checked [`OperationResult`].
//!
//! **Request deadlines.** [`ParentClient`] sends every request with the
//! time ([`ParentConnection::request_at`]): [`call`](ParentClient::call),
//! [`call_with_host`](ParentClient::call_with_host) (its async host
//! callback included) and [`next_event_before`](ParentClient::next_event_before)
//! never wait past the request's deadline (SPEC §10);
//! [`request_with_deadline`](ParentClient::request_with_deadline) and
//! [`call_with_host_before`](ParentClient::call_with_host_before) set a
//! host's own deadline instead of the policy's. When it passes the
//! error is `deadline_passed` ([`is_timed_out`](ProtocolError::is_timed_out)),
//! the connection is [`Abandoned`](crate::SessionState::Abandoned) and the
//! worker must be killed (SPEC §13.2).
//!
//! **Cancellation.** A call ends with `cancelled` (the connection
//! abandoned, the worker to be killed) as soon as a future handed to
//! [`cancel_when`](ParentClient::cancel_when) completes (a shutdown
//! signal, `CancellationToken::cancelled_owned()`, …), or within
//! [`CANCEL_CHECK_INTERVAL`]
//! of a host's own flag or predicate holding
//! ([`cancel_on`](ParentClient::cancel_on)); the async host callback of
//! `call_with_host` is dropped then. Dropping a call's future (cancel-safe,
//! as above) and then calling [`ParentClient::cancel`] does the same by
//! hand.
//!
//! **Hosts that drive their own loop** get the deadline checks of the
//! calls: [`host_response`](ParentClient::host_response) refuses with
//! `deadline_passed` once the request's deadline passed while the host ran
//! the command, [`check_deadline`](ParentClient::check_deadline) asks at
//! any time, and [`explain_write_failure`](ParentClient::explain_write_failure)
//! turns a failed write into the violation the worker had already sent.

use crate::cancellation::{CANCEL_CHECK_INTERVAL, Cancellation};
use crate::connection::{HostCommand, ParentConnection, Responded, WorkerConnection, WorkerEvent};
use crate::error::{ErrorKind, ProtocolError};
use crate::operations::TypedOperation;
use crate::records::{CommandOutcome, ErrorCode, HostCall, Operation, OperationResult, ShellError};
use crate::session::ParentEvent;
use ::tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use serde_json::Value;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long [`ParentClient::explain_write_failure`] waits for the worker's
/// stream to be readable, each time, before it gives up: the bytes it
/// looks for were written before the write failed, so they are there; the
/// wait only lets the reactor see them.
const EXPLAIN_WAIT: Duration = Duration::from_millis(20);

/// Bytes of the worker's stream read at most after a failed write (a
/// whole frame and its header).
const EXPLAIN_BYTES_MAX: usize = crate::limits::FRAME_BYTES_MAX + 4;

/// Bytes read from the stream per `read` call at most.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// The error of a read deadline the caller chose.
fn timed_out() -> ProtocolError {
    ProtocolError::io(
        "waiting for a frame",
        io::Error::new(io::ErrorKind::TimedOut, "the read deadline passed"),
    )
}

macro_rules! async_client_io {
    ($connection:ident, $event:ty) => {
        /// The connection, read-only (state, in-flight request, poison cause).
        pub fn connection(&self) -> &$connection {
            &self.connection
        }

        /// The writer, mutably; `None` after
        /// [`close_writer`](Self::close_writer). Shutting it down does not
        /// close every stream: tokio's `ChildStdin` stays open until it is
        /// dropped, so end a session with `close_writer`.
        pub fn writer_mut(&mut self) -> Option<&mut W> {
            self.writer.as_mut()
        }

        /// Split into the connection and the streams (the writer is `None`
        /// after [`close_writer`](Self::close_writer)).
        pub fn into_parts(self) -> ($connection, R, Option<W>) {
            (self.connection, self.reader, self.writer)
        }

        /// Write what is pending, shut the writer down and drop it, which
        /// closes the stream (for a child's stdin: the pipe, so a worker
        /// between requests exits 0, SPEC §3.3). Reading goes on:
        /// [`next_event`](Self::next_event) then reports the peer's end.
        /// Later sends are `invalid_use`. Calling it again does nothing.
        pub async fn close_writer(&mut self) -> Result<(), ProtocolError> {
            if self.writer.is_none() {
                return Ok(());
            }
            self.flush().await?;
            if let Some(writer) = self.writer.as_mut() {
                writer
                    .shutdown()
                    .await
                    .map_err(|error| ProtocolError::io("shutting the writer down", error))?;
            }
            self.writer = None;
            Ok(())
        }

        /// `invalid_use` once the writer was closed.
        fn check_writer(&self) -> Result<(), ProtocolError> {
            match self.writer {
                Some(_) => Ok(()),
                None => Err(ProtocolError::invalid_use(
                    "the writer was closed; nothing more can be sent",
                )),
            }
        }

        /// Write every pending outgoing byte and flush (cancel-safe).
        pub async fn flush(&mut self) -> Result<(), ProtocolError> {
            if self.connection.outgoing().is_empty() && self.writer.is_none() {
                return Ok(());
            }
            let Some(writer) = self.writer.as_mut() else {
                return Err(ProtocolError::invalid_use(
                    "the writer was closed; pending bytes cannot be written",
                ));
            };
            while !self.connection.outgoing().is_empty() {
                match writer.write(self.connection.outgoing()).await {
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
            writer
                .flush()
                .await
                .map_err(|error| ProtocolError::io("flushing frames", error))
        }

        /// The next event; `Ok(None)` at a clean end of stream (SPEC §9.5).
        /// Cancel-safe. Outgoing bytes still pending (a `request`,
        /// `host_response`, `respond` or `host_call` whose future was
        /// dropped mid-write) are written first: the peer answers only what
        /// it received, and it must be silent while it reads (SPEC §9.3).
        pub async fn next_event(&mut self) -> Result<Option<$event>, ProtocolError> {
            self.send_pending().await?;
            loop {
                if let Some(event) = self.connection.poll_event()? {
                    return Ok(Some(event));
                }
                if self.connection.is_ended() {
                    return Ok(None);
                }
                let read = loop {
                    match self.reader.read(&mut self.buffer).await {
                        Ok(read) => break read,
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(ProtocolError::io("reading frames", error)),
                    }
                };
                if read == 0 {
                    self.connection.end_of_stream()?;
                    return Ok(None);
                }
                self.connection.feed(&self.buffer[..read])?;
            }
        }

        /// [`next_event`](Self::next_event) that waits until `deadline` at
        /// most (the name and the `Instant` of the blocking adapter's
        /// `next_event_before`); on expiry an `io_error` of kind
        /// `TimedOut`, nothing lost, not poisoned. A parent never waits
        /// past the request's own deadline either: then the error is
        /// `deadline_passed` and the connection is abandoned (SPEC §10,
        /// §13.2).
        pub async fn next_event_before(
            &mut self,
            deadline: Instant,
        ) -> Result<Option<$event>, ProtocolError> {
            self.next_event_within(Some(deadline)).await
        }

        /// The next event, waiting until the earlier of `read_deadline`
        /// and the request's deadline (parent only).
        async fn next_event_within(
            &mut self,
            read_deadline: Option<Instant>,
        ) -> Result<Option<$event>, ProtocolError> {
            let until = match (self.request_due(), read_deadline) {
                (Some(due), Some(read)) => Some(due.min(read)),
                (due, read) => due.or(read),
            };
            let cancel = self.cancel_watch();
            let waited = {
                let events = self.next_event();
                let cancelled = cancel.cancelled();
                let bounded = async {
                    match until {
                        Some(until) => ::tokio::time::timeout_at(until.into(), events).await.ok(),
                        None => Some(events.await),
                    }
                };
                first_of(bounded, cancelled).await
            };
            match waited {
                First::Left(Some(result)) => result,
                First::Left(None) => {
                    // The timer fired: `until` has passed.
                    let until = until.unwrap_or_else(Instant::now);
                    self.deadline_reached(Instant::now().max(until))?;
                    Err(timed_out())
                }
                First::Right(()) => Err(self.cancelled_now()),
            }
        }
    };
}

/// What ends one of the tokio clients' waits besides input and the
/// deadline: a watched flag or predicate, and a future that completes.
#[derive(Clone, Default)]
struct CancelWatch {
    flag: Option<Cancellation>,
    when: Option<Arc<CancelWhen>>,
}

/// A cancellation future shared between the client and its waits: polled
/// by whichever wait is running, remembered once it completed.
struct CancelWhen {
    future: Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    fired: AtomicBool,
}

impl CancelWhen {
    /// Poll the future once; `Ready` once it completed (now or before).
    fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        // A poisoned lock means a poll of the future panicked; treat the
        // cancellation as fired (fail closed).
        let Ok(mut slot) = self.future.lock() else {
            self.fired.store(true, Ordering::Release);
            return Poll::Ready(());
        };
        let Some(future) = slot.as_mut() else {
            return Poll::Ready(());
        };
        match future.as_mut().poll(cx) {
            Poll::Ready(()) => {
                *slot = None;
                self.fired.store(true, Ordering::Release);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl CancelWatch {
    /// Whether either source says cancel, without waiting.
    fn is_cancelled(&self) -> bool {
        if self.flag.as_ref().is_some_and(Cancellation::is_cancelled) {
            return true;
        }
        let Some(when) = &self.when else {
            return false;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        when.poll_fired(&mut cx).is_ready()
    }

    /// Completes once either source says cancel; never without one.
    async fn cancelled(&self) {
        let flag = async {
            let Some(flag) = &self.flag else {
                return std::future::pending().await;
            };
            // A fixed period, not a `sleep` per check: a sleep of 1 ms
            // rounds up to the timer's next tick and would check every 2 ms.
            let mut ticks = ::tokio::time::interval(CANCEL_CHECK_INTERVAL);
            ticks.set_missed_tick_behavior(::tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if flag.is_cancelled() {
                    return;
                }
            }
        };
        let when = std::future::poll_fn(|cx| match &self.when {
            Some(when) => when.poll_fired(cx),
            None => Poll::Pending,
        });
        first_of(flag, when).await;
    }
}

/// Which of two futures completed first.
enum First<A, B> {
    Left(A),
    Right(B),
}

/// Run `left` and `right` together until one completes (the other is
/// dropped); `left` is polled first. (`tokio::select!` would need tokio's
/// `macros` feature and its proc-macro crate.)
async fn first_of<A, B>(
    left: impl Future<Output = A>,
    right: impl Future<Output = B>,
) -> First<A, B> {
    let mut left = pin!(left);
    let mut right = pin!(right);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(value) = left.as_mut().poll(cx) {
            return Poll::Ready(First::Left(value));
        }
        if let Poll::Ready(value) = right.as_mut().poll(cx) {
            return Poll::Ready(First::Right(value));
        }
        Poll::Pending
    })
    .await
}

/// An async parent: requests written to `W` (the worker's stdin), frames
/// read from `R` (the worker's stderr, SPEC §3.1). See
/// `examples/tokio_parent.rs`.
pub struct ParentClient<R, W> {
    connection: ParentConnection,
    reader: R,
    writer: Option<W>,
    buffer: Box<[u8]>,
    cancel: CancelWatch,
}

impl<R: std::fmt::Debug, W: std::fmt::Debug> std::fmt::Debug for ParentClient<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentClient")
            .field("connection", &self.connection)
            .field("reader", &self.reader)
            .field("writer", &self.writer)
            .field("cancel_on", &self.cancel.flag)
            .field("cancel_when", &self.cancel.when.is_some())
            .finish_non_exhaustive()
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ParentClient<R, W> {
    /// A client for a freshly spawned worker.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: ParentConnection::new(),
            reader,
            writer: Some(writer),
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            cancel: CancelWatch::default(),
        }
    }

    async_client_io!(ParentConnection, ParentEvent);

    /// The cancellation sources, for a wait (cheap: `Arc`s).
    fn cancel_watch(&self) -> CancelWatch {
        self.cancel.clone()
    }

    /// The `cancelled` error, the connection abandoned.
    fn cancelled_now(&mut self) -> ProtocolError {
        self.connection.cancel()
    }

    /// Cancel this client's calls once `cancellation` holds: a host's own
    /// `Arc<AtomicBool>` or a predicate ([`Cancellation::when`]); it
    /// replaces one set before. It is checked before every send, after
    /// every host callback, and while a call waits (for the worker or for
    /// the async host callback, which is dropped then) at least every
    /// [`CANCEL_CHECK_INTERVAL`]: the call fails with `cancelled`, the
    /// connection is [`Abandoned`](crate::SessionState::Abandoned), the
    /// worker must be killed (SPEC §13.2).
    pub fn cancel_on(&mut self, cancellation: impl Into<Cancellation>) {
        self.cancel.flag = Some(cancellation.into());
    }

    /// Cancel this client's calls once `future` completes (a shutdown
    /// signal, `tokio_util`'s `CancellationToken::cancelled_owned()`, a
    /// `oneshot` receiver mapped to `()`): a waiting call ends at once
    /// with `cancelled`, as with [`cancel_on`](Self::cancel_on) but
    /// without the check interval. It replaces a future set before.
    ///
    /// ```no_run
    /// # async fn demo(worker: &mut quirl_lua_protocol::tokio_io::ParentClient<tokio::process::ChildStderr, tokio::process::ChildStdin>) {
    /// use quirl_lua_protocol::operations::Eval;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// worker.cancel_when(async move { let _ = stopped.await; });
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    ///     let _ = stop.send(());
    /// });
    /// let error = worker.call(Eval::new("while true do end")).await.unwrap_err();
    /// assert!(error.is_cancelled());
    /// # }
    /// ```
    pub fn cancel_when(&mut self, future: impl Future<Output = ()> + Send + 'static) {
        self.cancel.when = Some(Arc::new(CancelWhen {
            future: Mutex::new(Some(Box::pin(future))),
            fired: AtomicBool::new(false),
        }));
    }

    /// `cancelled` (the connection abandoned) once a cancellation holds.
    fn check_cancelled(&mut self) -> Result<(), ProtocolError> {
        if self.cancel.is_cancelled() {
            return Err(self.connection.cancel());
        }
        Ok(())
    }

    /// For hosts that drive their own loop: `Ok` while the client may go
    /// on, else the error that ends the request — `cancelled` once a
    /// cancellation holds, `deadline_passed` once the deadline of the
    /// request in flight passed (SPEC §10, host calls included); the
    /// connection is then [`Abandoned`](crate::SessionState::Abandoned)
    /// and the worker must be killed (SPEC §13.2).
    /// [`host_response`](Self::host_response) and
    /// [`host_response_or_error`](Self::host_response_or_error) call it
    /// first, so no answer is sent past the deadline.
    pub fn check_deadline(&mut self) -> Result<(), ProtocolError> {
        self.check_cancelled()?;
        self.connection.handle_timeout(Instant::now())
    }

    /// After a write to the worker failed with `error`: the violation the
    /// worker had already committed when that explains the failure, else
    /// `error` unchanged (the blocking adapter's
    /// [`explain_write_failure`](crate::blocking::ParentClient::explain_write_failure)).
    /// It reads what the worker's stream holds (waiting at most a few
    /// milliseconds each time for the reactor to see it, and at most a
    /// frame's worth) and returns the connection's verdict on it, with the
    /// write error as context. The calls do this themselves; a host that
    /// drives its own loop calls it when a send fails.
    pub async fn explain_write_failure(&mut self, error: ProtocolError) -> ProtocolError {
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
            let chunk = budget.min(self.buffer.len());
            let read =
                ::tokio::time::timeout(EXPLAIN_WAIT, self.reader.read(&mut self.buffer[..chunk]))
                    .await;
            let read = match read {
                Ok(Ok(read)) => read,
                Ok(Err(_)) | Err(_) => return error,
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

    /// [`flush`](Self::flush) when bytes are pending, with a failed write
    /// judged by the connection (a worker that retired, SPEC §13.1-b) and
    /// explained by what the worker sent before it went
    /// ([`explain_write_failure`](Self::explain_write_failure)).
    async fn send_pending(&mut self) -> Result<(), ProtocolError> {
        if self.connection.outgoing().is_empty() {
            return Ok(());
        }
        match self.flush().await {
            Ok(()) => Ok(()),
            Err(error) => {
                let judged = self.connection.write_failed(error);
                Err(self.explain_write_failure(judged).await)
            }
        }
    }

    /// The deadline of the request in flight.
    fn request_due(&self) -> Option<Instant> {
        self.connection.next_deadline()
    }

    /// `deadline_passed` (the connection abandoned) if the request's
    /// deadline is reached at `now`.
    fn deadline_reached(&mut self, now: Instant) -> Result<(), ProtocolError> {
        self.connection.handle_timeout(now)
    }

    /// Bound `initialize` by `timeout` (see
    /// [`ParentConnection::set_startup_timeout`]).
    pub fn set_startup_timeout(&mut self, timeout: Duration) {
        self.connection.set_startup_timeout(timeout);
    }

    /// Give the session up ([`ParentConnection::cancel`]): the connection
    /// is [`Abandoned`](crate::SessionState::Abandoned) and the worker must
    /// be killed (SPEC §13.2); returns the `cancelled` error to report.
    /// A call in flight is cancelled by dropping its future (for example
    /// in a `select!` with a shutdown signal), then calling this.
    pub fn cancel(&mut self) -> ProtocolError {
        self.connection.cancel()
    }

    /// Send `operation` as the next request and write it; returns its id.
    /// The connection keeps its deadline from now
    /// ([`ParentConnection::request_at`]). If the future is dropped before
    /// the write completed, the rest is written by the next
    /// [`next_event`](Self::next_event) or [`flush`](Self::flush).
    pub async fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        self.check_writer()?;
        self.check_cancelled()?;
        let id = self.connection.request_at(operation, Instant::now())?;
        self.send_pending().await?;
        Ok(id)
    }

    /// [`request`](Self::request), due at `deadline` instead of the
    /// policy's budget: a host's own deadline, earlier or later, or a
    /// callback's deadline with its slack (DESIGN §17.6; see
    /// [`ParentConnection::request_with_deadline`]).
    pub async fn request_with_deadline(
        &mut self,
        operation: Operation,
        deadline: Instant,
    ) -> Result<u64, ProtocolError> {
        self.check_writer()?;
        self.check_cancelled()?;
        let id = self
            .connection
            .request_with_deadline(operation, Instant::now(), deadline)?;
        self.send_pending().await?;
        Ok(id)
    }

    /// Answer the pending host call and write the answer (resumed like
    /// [`request`](Self::request)'s). Refused with `deadline_passed` or
    /// `cancelled`, nothing written, once [`check_deadline`](Self::check_deadline)
    /// says the request is over.
    pub async fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.check_writer()?;
        self.check_deadline()?;
        self.connection.host_response(result)?;
        self.send_pending().await
    }

    /// Answer the pending host call, or with an error record when the
    /// answer cannot be sent (see
    /// [`ParentConnection::host_response_or_error`]), and write it;
    /// refused like [`host_response`](Self::host_response) once the
    /// request's deadline passed.
    pub async fn host_response_or_error(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_writer()?;
        self.check_deadline()?;
        let responded = self.connection.host_response_or_error(result)?;
        self.send_pending().await?;
        Ok(responded)
    }

    /// Send `operation` and wait for its response, answering host calls
    /// with the async function `host`, all under the request's deadline
    /// (SPEC §10: the policy's `wall_time_ms` from sending, host calls
    /// included). `Ok(Err(record))` is the worker's error response,
    /// `Ok(Ok(output))` its result typed by the operation
    /// ([`TypedOperation`]).
    ///
    /// When the deadline passes, while waiting for the worker or while
    /// `host` runs (its future is dropped then), the call fails with
    /// `deadline_passed` and the connection is
    /// [`Abandoned`](crate::SessionState::Abandoned): kill the worker
    /// (SPEC §13.2); a cancellation ([`cancel_on`](Self::cancel_on),
    /// [`cancel_when`](Self::cancel_when)) ends it with `cancelled` likewise.
    /// Host answers go through
    /// [`host_response_or_error`](Self::host_response_or_error) (output
    /// over the cap reaches the guest as `resource_limit`, SPEC §16.1-g); a
    /// worker that retired (SPEC §13.1-b) fails the call with
    /// `worker_retired`; a write that fails because the worker had already
    /// committed a violation reports the violation
    /// ([`explain_write_failure`](Self::explain_write_failure)).
    ///
    /// ```no_run
    /// # async fn demo(worker: &mut quirl_lua_protocol::tokio_io::ParentClient<tokio::process::ChildStderr, tokio::process::ChildStdin>) -> Result<(), quirl_lua_protocol::ProtocolError> {
    /// use quirl_lua_protocol::operations::Eval;
    /// use quirl_lua_protocol::records::{CommandOutcome, HostCall};
    /// let source = "return quirl.process.run('date').value";
    /// let answer = worker
    ///     .call_with_host(Eval::new(source), async |call: &HostCall| {
    ///         let stdout = format!("ran {}", call.command); // e.g. an async process run
    ///         Ok(CommandOutcome { status: 0, stdout: Some(stdout), stderr: None })
    ///     })
    ///     .await?;
    /// # let _ = answer; Ok(()) }
    /// ```
    #[allow(clippy::result_large_err)]
    pub async fn call_with_host<O: TypedOperation>(
        &mut self,
        operation: O,
        host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<O::Output, ShellError>, ProtocolError> {
        self.check_writer()?;
        self.check_cancelled()?;
        self.connection
            .request_at(operation.into_operation(), Instant::now())?;
        self.send_pending().await?;
        let result = self.answer_until_response(host).await?;
        typed_output::<O>(result)
    }

    /// [`call_with_host`](Self::call_with_host) due at `deadline` instead
    /// of the policy's budget (see
    /// [`request_with_deadline`](Self::request_with_deadline)); the same
    /// outcomes when it passes.
    #[allow(clippy::result_large_err)]
    pub async fn call_with_host_before<O: TypedOperation>(
        &mut self,
        operation: O,
        deadline: Instant,
        host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<O::Output, ShellError>, ProtocolError> {
        self.check_writer()?;
        self.check_cancelled()?;
        self.connection.request_with_deadline(
            operation.into_operation(),
            Instant::now(),
            deadline,
        )?;
        self.send_pending().await?;
        let result = self.answer_until_response(host).await?;
        typed_output::<O>(result)
    }

    /// Wait for the response to the request just sent, answering its host
    /// calls with `host`, under the request's deadline and the client's
    /// cancellation.
    async fn answer_until_response(
        &mut self,
        mut host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        loop {
            match self.next_event_within(None).await? {
                Some(ParentEvent::Response { result, .. }) => return Ok(result),
                Some(ParentEvent::HostCall(call)) => {
                    let due = self.connection.next_deadline();
                    let cancel = self.cancel_watch();
                    let ran = {
                        let bounded = async {
                            match due {
                                Some(due) => ::tokio::time::timeout_at(due.into(), host(&call))
                                    .await
                                    .ok(),
                                None => Some(host(&call).await),
                            }
                        };
                        first_of(bounded, cancel.cancelled()).await
                    };
                    let answer = match ran {
                        First::Left(Some(answer)) => answer,
                        First::Left(None) => {
                            let now = Instant::now().max(due.unwrap_or_else(Instant::now));
                            return Err(match self.connection.handle_timeout(now) {
                                Err(error) => error,
                                Ok(()) => timed_out(),
                            });
                        }
                        First::Right(()) => return Err(self.cancelled_now()),
                    };
                    // The host call's time counts (SPEC §10).
                    self.check_deadline()?;
                    self.connection.host_response_or_error(answer)?;
                    self.send_pending().await?;
                }
                None => {
                    return Err(ProtocolError::invalid_use(
                        "the worker's stream ended before the response",
                    ));
                }
            }
        }
    }

    /// [`call_with_host`](Self::call_with_host) for a host that runs no
    /// processes (host calls get an `invalid_command` error record).
    /// `call(Eval::new("return 1"))` answers with a `serde_json::Value`;
    /// see [`crate::operations`].
    #[allow(clippy::result_large_err)]
    pub async fn call<O: TypedOperation>(
        &mut self,
        operation: O,
    ) -> Result<Result<O::Output, ShellError>, ProtocolError> {
        self.call_with_host(operation, async |_: &HostCall| {
            Err(ShellError::new(
                ErrorCode::InvalidCommand,
                "this host runs no processes",
            ))
        })
        .await
    }
}

/// The typed output of a checked result.
#[allow(clippy::result_large_err)]
fn typed_output<O: TypedOperation>(
    result: Result<OperationResult, ShellError>,
) -> Result<Result<O::Output, ShellError>, ProtocolError> {
    match result {
        Ok(result) => O::output(result).map(Ok),
        Err(record) => Ok(Err(record)),
    }
}

/// An async worker: requests read from `R`, frames written to `W`.
#[derive(Debug)]
pub struct WorkerClient<R, W> {
    connection: WorkerConnection,
    reader: R,
    writer: Option<W>,
    buffer: Box<[u8]>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> WorkerClient<R, W> {
    /// A client awaiting `initialize`.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: WorkerConnection::new(),
            reader,
            writer: Some(writer),
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    async_client_io!(WorkerConnection, WorkerEvent);

    /// A worker keeps no request deadline (the parent does, SPEC §10).
    fn request_due(&self) -> Option<Instant> {
        None
    }

    /// Nothing to do at a deadline: the caller's read deadline only.
    fn deadline_reached(&mut self, _now: Instant) -> Result<(), ProtocolError> {
        Ok(())
    }

    /// A worker watches no cancellation (the parent cancels, SPEC §13).
    fn cancel_watch(&self) -> CancelWatch {
        CancelWatch::default()
    }

    /// Never reached: a worker's [`CancelWatch`] never completes.
    fn cancelled_now(&mut self) -> ProtocolError {
        ProtocolError::invalid_use("a worker client is never cancelled")
    }

    /// [`flush`](Self::flush) when bytes are pending.
    async fn send_pending(&mut self) -> Result<(), ProtocolError> {
        if self.connection.outgoing().is_empty() {
            return Ok(());
        }
        self.flush().await
    }

    /// Answer the request in flight and write the answer.
    pub async fn respond(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.check_writer()?;
        self.connection.respond(result)?;
        self.flush().await
    }

    /// Answer, or fall back to an error record, and write it.
    pub async fn respond_or_error(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_writer()?;
        let responded = self.connection.respond_or_error(result)?;
        self.flush().await?;
        Ok(responded)
    }

    /// [`respond_or_error`](Self::respond_or_error) for a JSON result.
    pub async fn respond_json_or_error(
        &mut self,
        result: Result<Value, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_writer()?;
        let responded = self.connection.respond_json_or_error(result)?;
        self.flush().await?;
        Ok(responded)
    }

    /// Send a host call, write it, and wait for its host response.
    pub async fn host_call(
        &mut self,
        call: HostCommand,
    ) -> Result<Result<CommandOutcome, ShellError>, ProtocolError> {
        self.check_writer()?;
        self.connection.host_call(call)?;
        self.flush().await?;
        match self.next_event().await? {
            Some(WorkerEvent::HostResponse(response)) => Ok(response.result),
            _ => Err(ProtocolError::invalid_use(
                "no host response arrived for the host call",
            )),
        }
    }
}
