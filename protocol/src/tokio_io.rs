//! Async adapters (feature `tokio`): a connection of either role over
//! tokio's `AsyncRead`/`AsyncWrite`.
//!
//! The same shape as [`crate::blocking`]: every byte read is fed to the
//! connection at once, so partial frames and bytes after a frame survive
//! between calls. `next_event` and `flush` are **cancel-safe**: dropping
//! their future (for example when a `tokio::time::timeout` or a `select!`
//! branch wins) loses no byte: a read either completed and was fed, or
//! read nothing; written bytes are consumed as each write completes.
//! `next_event_timeout` wraps exactly that.

use crate::connection::{HostCommand, ParentConnection, Responded, WorkerConnection, WorkerEvent};
use crate::error::ProtocolError;
use crate::records::{CommandOutcome, ErrorCode, HostCall, Operation, OperationResult, ShellError};
use crate::session::ParentEvent;
use ::tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use serde_json::Value;
use std::io;
use std::time::Duration;

/// Bytes read from the stream per `read` call at most.
const READ_CHUNK_BYTES: usize = 16 * 1024;

fn timed_out(timeout: Duration) -> ProtocolError {
    ProtocolError::io(
        "waiting for a frame",
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no frame within {} ms", timeout.as_millis()),
        ),
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

        /// [`next_event`](Self::next_event) bounded by `timeout`; on expiry
        /// an `io_error` of kind `TimedOut`, nothing lost, not poisoned.
        pub async fn next_event_timeout(
            &mut self,
            timeout: Duration,
        ) -> Result<Option<$event>, ProtocolError> {
            match ::tokio::time::timeout(timeout, self.next_event()).await {
                Ok(result) => result,
                Err(_) => Err(timed_out(timeout)),
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

    /// Send `operation` as the next request and write it; returns its id.
    /// If the future is dropped before the write completed, the rest is
    /// written by the next [`next_event`](Self::next_event) or
    /// [`flush`](Self::flush).
    pub async fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        self.check_writer()?;
        let id = self.connection.request(operation)?;
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
    /// with `host`. `Ok(Err(record))` is the worker's error response.
    /// Host answers go through
    /// [`host_response_or_error`](Self::host_response_or_error) (output
    /// over the cap reaches the guest as `resource_limit`, SPEC §16.1-g); a
    /// worker that retired (SPEC §13.1-b) fails the call with
    /// `worker_retired`.
    pub async fn call_with_host(
        &mut self,
        operation: Operation,
        mut host: impl FnMut(&HostCall) -> Result<CommandOutcome, ShellError>,
    ) -> Result<Result<OperationResult, ShellError>, ProtocolError> {
        self.request(operation).await?;
        loop {
            match self.next_event().await? {
                Some(ParentEvent::Response { result, .. }) => return Ok(result),
                Some(ParentEvent::HostCall(call)) => {
                    let answer = host(&call);
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
        self.call_with_host(operation, |_| {
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
