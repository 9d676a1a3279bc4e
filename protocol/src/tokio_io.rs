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
//! `std::time::Instant` are those of the blocking adapter (the older
//! `next_event_timeout(Duration)` is deprecated).
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
//! worker must be killed (SPEC §13.2). Cancelling is dropping the future
//! (cancel-safe, as above) or [`ParentConnection::cancel`] through
//! [`ParentClient::cancel`].

use crate::connection::{HostCommand, ParentConnection, Responded, WorkerConnection, WorkerEvent};
use crate::error::ProtocolError;
use crate::records::{CommandOutcome, ErrorCode, HostCall, Operation, OperationResult, ShellError};
use crate::session::ParentEvent;
use ::tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use serde_json::Value;
use std::io;
use std::time::{Duration, Instant};

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

        /// [`next_event`](Self::next_event) bounded by `timeout`.
        #[deprecated(
            since = "0.1.0",
            note = "use `next_event_before(Instant::now() + timeout)`, named like the blocking adapter's"
        )]
        pub async fn next_event_timeout(
            &mut self,
            timeout: Duration,
        ) -> Result<Option<$event>, ProtocolError> {
            self.next_event_within(Instant::now().checked_add(timeout))
                .await
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
            let Some(until) = until else {
                return self.next_event().await;
            };
            match ::tokio::time::timeout_at(until.into(), self.next_event()).await {
                Ok(result) => result,
                Err(_) => {
                    // The timer fired: `until` has passed.
                    self.deadline_reached(Instant::now().max(until))?;
                    Err(timed_out())
                }
            }
        }
    };
}

/// An async parent: requests written to `W` (the worker's stdin), frames
/// read from `R` (the worker's stderr, SPEC §3.1). See
/// `examples/tokio_parent.rs`.
#[derive(Debug)]
pub struct ParentClient<R, W> {
    connection: ParentConnection,
    reader: R,
    writer: Option<W>,
    buffer: Box<[u8]>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ParentClient<R, W> {
    /// A client for a freshly spawned worker.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: ParentConnection::new(),
            reader,
            writer: Some(writer),
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    async_client_io!(ParentConnection, ParentEvent);

    /// [`flush`](Self::flush) when bytes are pending, with a failed write
    /// judged by the connection (a worker that retired, SPEC §13.1-b).
    async fn send_pending(&mut self) -> Result<(), ProtocolError> {
        if self.connection.outgoing().is_empty() {
            return Ok(());
        }
        let flushed = self.flush().await;
        flushed.map_err(|error| self.connection.write_failed(error))
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
        let id = self
            .connection
            .request_with_deadline(operation, Instant::now(), deadline)?;
        self.send_pending().await?;
        Ok(id)
    }

    /// Answer the pending host call and write the answer (resumed like
    /// [`request`](Self::request)'s).
    pub async fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.check_writer()?;
        self.connection.host_response(result)?;
        self.send_pending().await
    }

    /// Answer the pending host call, or with an error record when the
    /// answer cannot be sent (see
    /// [`ParentConnection::host_response_or_error`]), and write it.
    pub async fn host_response_or_error(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        self.check_writer()?;
        let responded = self.connection.host_response_or_error(result)?;
        self.send_pending().await?;
        Ok(responded)
    }

    /// Send `operation` and wait for its response, answering host calls
    /// with the async function `host`, all under the request's deadline
    /// (SPEC §10: the policy's `wall_time_ms` from sending, host calls
    /// included). `Ok(Err(record))` is the worker's error response.
    ///
    /// When the deadline passes, while waiting for the worker or while
    /// `host` runs (its future is dropped then), the call fails with
    /// `deadline_passed` and the connection is
    /// [`Abandoned`](crate::SessionState::Abandoned): kill the worker
    /// (SPEC §13.2). Host answers go through
    /// [`host_response_or_error`](Self::host_response_or_error) (output
    /// over the cap reaches the guest as `resource_limit`, SPEC §16.1-g); a
    /// worker that retired (SPEC §13.1-b) fails the call with
    /// `worker_retired`.
    ///
    /// ```no_run
    /// # async fn demo(worker: &mut quirl_lua_protocol::tokio_io::ParentClient<tokio::process::ChildStderr, tokio::process::ChildStdin>) -> Result<(), quirl_lua_protocol::ProtocolError> {
    /// use quirl_lua_protocol::records::{CommandOutcome, HostCall, Operation};
    /// let source = "return quirl.process.run('date').value".to_owned();
    /// let answer = worker
    ///     .call_with_host(Operation::Eval { source }, async |call: &HostCall| {
    ///         let stdout = format!("ran {}", call.command); // e.g. an async process run
    ///         Ok(CommandOutcome { status: 0, stdout: Some(stdout), stderr: None })
    ///     })
    ///     .await?;
    /// # let _ = answer; Ok(()) }
    /// ```
    pub async fn call_with_host(
        &mut self,
        operation: Operation,
        host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        self.request(operation).await?;
        self.answer_until_response(host).await
    }

    /// [`call_with_host`](Self::call_with_host) due at `deadline` instead
    /// of the policy's budget (see
    /// [`request_with_deadline`](Self::request_with_deadline)); the same
    /// outcomes when it passes.
    pub async fn call_with_host_before(
        &mut self,
        operation: Operation,
        deadline: Instant,
        host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        self.request_with_deadline(operation, deadline).await?;
        self.answer_until_response(host).await
    }

    /// Wait for the response to the request just sent, answering its host
    /// calls with `host`, under the request's deadline.
    async fn answer_until_response(
        &mut self,
        mut host: impl AsyncFnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        loop {
            match self.next_event_within(None).await? {
                Some(ParentEvent::Response { result, .. }) => return Ok(result),
                Some(ParentEvent::HostCall(call)) => {
                    let answer = match self.connection.next_deadline() {
                        Some(due) => {
                            match ::tokio::time::timeout_at(due.into(), host(&call)).await {
                                Ok(answer) => answer,
                                Err(_) => {
                                    let now = Instant::now().max(due);
                                    return Err(match self.connection.handle_timeout(now) {
                                        Err(error) => error,
                                        Ok(()) => timed_out(),
                                    });
                                }
                            }
                        }
                        None => host(&call).await,
                    };
                    // The host call's time counts (SPEC §10).
                    self.connection.handle_timeout(Instant::now())?;
                    self.host_response_or_error(answer).await?;
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
    // The error record is the wire\'s own type (SPEC §6.9); boxing it here
    // would only differ from every other answer path.
    #[allow(clippy::result_large_err)]
    pub async fn call(
        &mut self,
        operation: Operation,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        self.call_with_host(operation, async |_: &HostCall| {
            Err(ShellError::new(
                ErrorCode::InvalidCommand,
                "this host runs no processes",
            ))
        })
        .await
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
