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

        /// The writer, mutably (e.g. to shut it down and end the session).
        pub fn writer_mut(&mut self) -> &mut W {
            &mut self.writer
        }

        /// Split into the connection and the streams.
        pub fn into_parts(self) -> ($connection, R, W) {
            (self.connection, self.reader, self.writer)
        }

        /// Write every pending outgoing byte and flush (cancel-safe).
        pub async fn flush(&mut self) -> Result<(), ProtocolError> {
            while !self.connection.outgoing().is_empty() {
                match self.writer.write(self.connection.outgoing()).await {
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
                .await
                .map_err(|error| ProtocolError::io("flushing frames", error))
        }

        /// The next event; `Ok(None)` at a clean end of stream (SPEC §9.5).
        /// Cancel-safe.
        pub async fn next_event(&mut self) -> Result<Option<$event>, ProtocolError> {
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
    writer: W,
    buffer: Box<[u8]>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ParentClient<R, W> {
    /// A client for a freshly spawned worker.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: ParentConnection::new(),
            reader,
            writer,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    async_client_io!(ParentConnection, ParentEvent);

    /// Send `operation` as the next request and write it; returns its id.
    pub async fn request(&mut self, operation: Operation) -> Result<u64, ProtocolError> {
        let id = self.connection.request(operation)?;
        self.flush().await?;
        Ok(id)
    }

    /// Answer the pending host call and write the answer.
    pub async fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.connection.host_response(result)?;
        self.flush().await
    }

    /// Send `operation` and wait for its response, answering host calls
    /// with `host`. `Ok(Err(record))` is the worker's error response.
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
                    self.host_response(answer).await?;
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
    writer: W,
    buffer: Box<[u8]>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> WorkerClient<R, W> {
    /// A client awaiting `initialize`.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            connection: WorkerConnection::new(),
            reader,
            writer,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    async_client_io!(WorkerConnection, WorkerEvent);

    /// Answer the request in flight and write the answer.
    pub async fn respond(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<(), ProtocolError> {
        self.connection.respond(result)?;
        self.flush().await
    }

    /// Answer, or fall back to an error record, and write it.
    pub async fn respond_or_error(
        &mut self,
        result: Result<OperationResult, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let responded = self.connection.respond_or_error(result)?;
        self.flush().await?;
        Ok(responded)
    }

    /// [`respond_or_error`](Self::respond_or_error) for a JSON result.
    pub async fn respond_json_or_error(
        &mut self,
        result: Result<Value, ShellError>,
    ) -> Result<Responded, ProtocolError> {
        let responded = self.connection.respond_json_or_error(result)?;
        self.flush().await?;
        Ok(responded)
    }

    /// Send a host call, write it, and wait for its host response.
    pub async fn host_call(
        &mut self,
        call: HostCommand,
    ) -> Result<Result<CommandOutcome, ShellError>, ProtocolError> {
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
