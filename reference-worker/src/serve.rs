//! The serve loop: the protocol session around one [`Vm`].
//!
//! [`serve`] drives the protocol crate's blocking [`WorkerClient`] (its
//! `WorkerConnection` decodes strictly, checks every frame against the
//! session and applies SPEC §9.5 at end of input) and hands each decoded
//! request to the VM. It builds no VM before a valid
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

use crate::error::OpError;
use crate::sandbox::sdk::{HostPort, HostReply, HostRequest};
use crate::vm::{Verdict, Vm, VmConfig};
use quirl_lua_protocol::blocking::WorkerClient;
use quirl_lua_protocol::records as wire;
use quirl_lua_protocol::records::Operation;
use quirl_lua_protocol::{ErrorKind, HostCommand, ProtocolError, WorkerEvent};
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

/// The protocol crate's blocking worker client, shared by the loop and the
/// host port, with the failure a host call ran into (the VM only records a
/// reason; the client's poison cause does not cover I/O failures).
struct Endpoint<R, W> {
    client: WorkerClient<R, W>,
    host_failure: Option<ProtocolError>,
}

impl<R: Read, W: Write> Endpoint<R, W> {
    /// Answer the request in flight. A result that cannot be sent (too
    /// large, or not the operation's typed result) is answered with an
    /// error record instead (DESIGN §15.10); that is not a violation.
    fn respond(
        &mut self,
        result: Result<serde_json::Value, wire::ShellError>,
    ) -> Result<(), ProtocolError> {
        self.client.respond_json_or_error(result).map(drop)
    }
}

type Shared<R, W> = Arc<Mutex<Endpoint<R, W>>>;

fn lock<R, W>(
    endpoint: &Shared<R, W>,
) -> Result<std::sync::MutexGuard<'_, Endpoint<R, W>>, ProtocolError> {
    endpoint
        .lock()
        .map_err(|_| ProtocolError::new(ErrorKind::IoError, "the worker channel is unavailable"))
}

/// The host port over the session: host call out, host response in.
struct SessionHost<R, W> {
    endpoint: Shared<R, W>,
}

impl<R: Read + Send, W: Write + Send> HostPort for SessionHost<R, W> {
    fn call(&mut self, request: HostRequest) -> HostReply {
        let Ok(mut endpoint) = self.endpoint.lock() else {
            return HostReply::Violation("the worker channel is unavailable".to_owned());
        };
        let call = HostCommand {
            command: request.command,
            deadline_ms: request.deadline_ms,
            max_output_bytes: request.max_output_bytes,
        };
        match endpoint.client.host_call(call) {
            Ok(Ok(outcome)) => HostReply::Outcome(outcome),
            Ok(Err(error)) => HostReply::Error(from_wire(&error)),
            Err(error) => {
                let reason = error.to_string();
                endpoint.host_failure.get_or_insert(error);
                HostReply::Violation(reason)
            }
        }
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
    let endpoint: Shared<R, W> = Arc::new(Mutex::new(Endpoint {
        client: WorkerClient::new(input, output),
        host_failure: None,
    }));
    let mut vm: Option<Vm> = None;
    let result = serve_loop(&endpoint, &mut vm, &options);
    match &result {
        // A VM whose budget tripped is never closed: its finalizers and
        // close handlers must not run again in this process.
        Ok(Ending::Retired) | Err(_) => std::mem::forget(vm),
        Ok(Ending::EndOfInput) => drop(vm),
    }
    result
}

fn serve_loop<R, W>(
    endpoint: &Shared<R, W>,
    vm: &mut Option<Vm>,
    options: &ServeOptions,
) -> Result<Ending, WorkerError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    loop {
        // The connection applies SPEC §9.5: `None` is a clean end of input.
        let event = lock(endpoint)?.client.next_event()?;
        let request = match event {
            None => return Ok(Ending::EndOfInput),
            Some(WorkerEvent::Request(request)) => request,
            // The session accepts only requests here: a host response
            // without a pending host call is a violation it has reported.
            Some(_) => {
                return Err(ProtocolError::new(
                    ErrorKind::UnexpectedFrame,
                    "a frame other than a request between requests",
                )
                .into());
            }
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
                        endpoint: Arc::clone(endpoint),
                    }) as Box<dyn HostPort>
                });
                match Vm::new(&config, Arc::clone(&options.cancel), host) {
                    Ok(built) => {
                        *vm = Some(built);
                        crate::lockdown::after_vm_built(options.lockdown)
                            .map_err(|e| ProtocolError::new(ErrorKind::IoError, e.to_string()))?;
                        lock(endpoint)?.respond(Ok(serde_json::Value::Null))?;
                    }
                    Err(error) => {
                        lock(endpoint)?.respond(Err(to_wire(&error.bounded())))?;
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
                    Verdict::Success(value) => lock(endpoint)?.respond(Ok(value))?,
                    Verdict::Failure(error) => lock(endpoint)?.respond(Err(to_wire(&error)))?,
                    Verdict::Retired(error) => {
                        lock(endpoint)?.respond(Err(to_wire(&error)))?;
                        return Ok(Ending::Retired);
                    }
                    Verdict::Violation(reason) => {
                        let mut guard = lock(endpoint)?;
                        let error = guard.host_failure.take().unwrap_or_else(|| {
                            ProtocolError::new(ErrorKind::UnexpectedFrame, reason)
                        });
                        return Err(error.into());
                    }
                }
                // The answer is out: free what the request left (check's
                // parse tree) while the parent reads it.
                current.release_deferred();
            }
        }
    }
}
