//! The serve loop: the protocol session around one [`Vm`].
//!
//! [`serve`] reads parent frames from `input`, runs them through the
//! protocol crate's strict decoder and [`WorkerSession`], and writes the
//! worker's frames to `output`. It builds no VM before a valid
//! `initialize`. It ends:
//! - with [`Ending::EndOfInput`] when the input ends at a frame boundary
//!   outside a request;
//! - with [`Ending::Retired`] after answering a request during which a
//!   budget tripped, or an `initialize` that failed; the VM is then leaked,
//!   never closed (its finalizers must not run), and the process should
//!   exit;
//! - with a [`WorkerError`] on any protocol violation in either direction
//!   (including a bad host response, which the guest never sees) and on any
//!   I/O failure; nothing further is executed or written.

use crate::error::{ErrorCode, OpError};
use crate::sdk::{HostPort, HostReply, HostRequest};
use crate::vm::{Verdict, Vm, VmConfig};
use quirl_lua_protocol::records as wire;
use quirl_lua_protocol::{
    ErrorKind, Feed, FrameDecoder, Operation, ParentFrame, ProtocolError, WorkerSession,
};
use std::fmt;
use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Options of [`serve`].
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Cancellation flag observed by the VM's hook and allocator; setting it
    /// stops the current request with a `cancellation` limit.
    pub cancel: Arc<AtomicBool>,
    /// Whether the process locks itself down after `initialize` built the
    /// VM (no-new-privileges + seccomp, see [`crate::lockdown`]). Default
    /// `Off`: an in-process caller must not lock down its host process;
    /// the worker binaries turn it on.
    pub lockdown: crate::lockdown::Lockdown,
}

/// How a session ended without a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The input ended at a frame boundary while no request was in flight.
    EndOfInput,
    /// The worker answered and retired its VM (a budget tripped, or
    /// `initialize` failed).
    Retired,
}

/// Why a session failed.
#[derive(Debug, Clone)]
pub struct WorkerError {
    error: ProtocolError,
}

impl WorkerError {
    /// The protocol error kind (`io_error` for stream failures).
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }

    /// The underlying protocol error.
    pub fn protocol_error(&self) -> &ProtocolError {
        &self.error
    }
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker session failed: {}", self.error)
    }
}

impl std::error::Error for WorkerError {}

impl From<ProtocolError> for WorkerError {
    fn from(error: ProtocolError) -> Self {
        Self { error }
    }
}

/// Bytes read from the input per `read` call at most.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// The stream and the session, shared by the loop and the host port.
struct Channel<R, W> {
    input: R,
    output: W,
    session: WorkerSession,
    /// The violation a host call ran into (the VM only records a reason).
    violation: Option<ProtocolError>,
    /// Read buffer, reused for every frame.
    chunk: Box<[u8]>,
}

impl<R: Read, W: Write> Channel<R, W> {
    /// Read one frame's payload (`None` at a clean end of input). Like the
    /// protocol crate's `read_payload`: never reads past the frame, never
    /// reserves ahead of received bytes.
    fn read_payload(&mut self) -> Result<Option<Vec<u8>>, ProtocolError> {
        let mut decoder = FrameDecoder::new();
        loop {
            let want = decoder.bytes_wanted().min(self.chunk.len());
            let read = match self.input.read(&mut self.chunk[..want]) {
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(ProtocolError::new(
                        ErrorKind::IoError,
                        format!("reading a frame failed: {error}"),
                    ));
                }
            };
            if read == 0 {
                decoder.finish()?;
                return Ok(None);
            }
            if let Feed::Frame { payload, .. } = decoder.feed(&self.chunk[..read])? {
                return Ok(Some(payload));
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        self.output
            .write_all(bytes)
            .and_then(|()| self.output.flush())
            .map_err(|e| {
                ProtocolError::new(ErrorKind::IoError, format!("writing a frame failed: {e}"))
            })
    }

    fn respond(
        &mut self,
        result: Result<serde_json::Value, wire::ShellError>,
    ) -> Result<(), ProtocolError> {
        let bytes = match self.session.respond(result) {
            Ok(bytes) => bytes,
            // Not a violation: the result could not be sent (too large, or
            // not the operation's typed result). Answer with an error.
            Err(error) if self.session.poison_cause().is_none() => {
                let record = to_wire(
                    &OpError::new(
                        if error.kind() == ErrorKind::OversizedFrame {
                            ErrorCode::ResourceLimit
                        } else {
                            ErrorCode::Validation
                        },
                        "the worker could not send the operation's result",
                    )
                    .with_context(error.to_string())
                    .bounded(),
                );
                self.session.respond(Err(record))?
            }
            Err(error) => return Err(error),
        };
        self.write(&bytes)
    }
}

type Shared<R, W> = Arc<Mutex<Channel<R, W>>>;

fn lock<R, W>(
    channel: &Shared<R, W>,
) -> Result<std::sync::MutexGuard<'_, Channel<R, W>>, ProtocolError> {
    channel
        .lock()
        .map_err(|_| ProtocolError::new(ErrorKind::IoError, "the worker channel is unavailable"))
}

/// The host port over the session: host call out, host response in.
struct SessionHost<R, W> {
    channel: Shared<R, W>,
}

impl<R: Read + Send, W: Write + Send> HostPort for SessionHost<R, W> {
    fn call(&mut self, request: HostRequest) -> HostReply {
        let Ok(mut channel) = self.channel.lock() else {
            return HostReply::Violation("the worker channel is unavailable".to_owned());
        };
        match exchange(&mut channel, request) {
            Ok(reply) => reply,
            Err(error) => {
                let reason = error.to_string();
                channel.violation.get_or_insert(error);
                HostReply::Violation(reason)
            }
        }
    }
}

fn exchange<R: Read, W: Write>(
    channel: &mut Channel<R, W>,
    request: HostRequest,
) -> Result<HostReply, ProtocolError> {
    let bytes = channel.session.host_call(
        request.command,
        request.deadline_ms,
        request.max_output_bytes,
    )?;
    channel.write(&bytes)?;
    let Some(payload) = channel.read_payload()? else {
        return Err(ProtocolError::new(
            ErrorKind::TruncatedHeader,
            "the input ended while a host call was pending",
        ));
    };
    match channel.session.receive_payload(&payload)? {
        ParentFrame::HostResponse { response } => Ok(match response.result {
            Ok(outcome) => HostReply::Outcome(outcome),
            Err(error) => HostReply::Error(from_wire(&error)),
        }),
        // The session rejects a request while a host call is pending; this
        // arm is never reached with a healthy session.
        ParentFrame::Request { .. } => Err(ProtocolError::new(
            ErrorKind::UnexpectedFrame,
            "a request arrived while a host call was pending",
        )),
    }
}

/// An operation error as the protocol's error record (which it wraps).
pub fn to_wire(error: &OpError) -> wire::ShellError {
    wire::ShellError::clone(error)
}

/// A protocol error record as an operation error.
pub fn from_wire(error: &wire::ShellError) -> OpError {
    OpError::from(error.clone())
}

/// Serve one session over `input`/`output` (see the module docs).
pub fn serve<R, W>(input: R, output: W, options: ServeOptions) -> Result<Ending, WorkerError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let channel: Shared<R, W> = Arc::new(Mutex::new(Channel {
        input,
        output,
        session: WorkerSession::new(),
        violation: None,
        chunk: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
    }));
    let mut vm: Option<Vm> = None;
    let result = serve_loop(&channel, &mut vm, &options);
    match &result {
        // A VM whose budget tripped is never closed: its finalizers and
        // close handlers must not run again in this process.
        Ok(Ending::Retired) | Err(_) => std::mem::forget(vm),
        Ok(Ending::EndOfInput) => drop(vm),
    }
    result
}

fn serve_loop<R, W>(
    channel: &Shared<R, W>,
    vm: &mut Option<Vm>,
    options: &ServeOptions,
) -> Result<Ending, WorkerError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    loop {
        let frame = {
            let mut guard = lock(channel)?;
            let channel = &mut *guard;
            match channel.read_payload()? {
                None => return Ok(Ending::EndOfInput),
                Some(payload) => channel.session.receive_payload(&payload)?,
            }
        };
        // The session accepts only requests here: a host response without a
        // pending host call is a violation it has already reported.
        let ParentFrame::Request { request } = frame else {
            return Err(ProtocolError::new(
                ErrorKind::UnexpectedFrame,
                "a host response without a host call",
            )
            .into());
        };
        match request.operation {
            Operation::Initialize {
                policy,
                grants,
                process_enabled,
                ..
            } => {
                let config = VmConfig {
                    policy,
                    grants,
                    process_enabled,
                };
                let host: Option<Box<dyn HostPort>> = process_enabled.then(|| {
                    Box::new(SessionHost {
                        channel: Arc::clone(channel),
                    }) as Box<dyn HostPort>
                });
                match Vm::new(&config, Arc::clone(&options.cancel), host) {
                    Ok(built) => {
                        *vm = Some(built);
                        crate::lockdown::after_vm_built(options.lockdown)
                            .map_err(|e| ProtocolError::new(ErrorKind::IoError, e.to_string()))?;
                        lock(channel)?.respond(Ok(serde_json::Value::Null))?;
                    }
                    Err(error) => {
                        lock(channel)?.respond(Err(to_wire(&error.bounded())))?;
                        return Ok(Ending::Retired);
                    }
                }
            }
            operation => {
                let Some(current) = vm.as_mut() else {
                    return Err(ProtocolError::new(
                        ErrorKind::UnexpectedFrame,
                        "a request before initialize",
                    )
                    .into());
                };
                crate::lockdown::before_request();
                match current.handle(operation) {
                    Verdict::Success(value) => lock(channel)?.respond(Ok(value))?,
                    Verdict::Failure(error) => lock(channel)?.respond(Err(to_wire(&error)))?,
                    Verdict::Retired(error) => {
                        lock(channel)?.respond(Err(to_wire(&error)))?;
                        return Ok(Ending::Retired);
                    }
                    Verdict::Violation(reason) => {
                        let mut guard = lock(channel)?;
                        let error = guard.violation.take().unwrap_or_else(|| {
                            ProtocolError::new(ErrorKind::UnexpectedFrame, reason)
                        });
                        return Err(error.into());
                    }
                }
            }
        }
    }
}
