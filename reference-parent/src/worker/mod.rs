//! The worker handle: one supervised worker process, one request at a time.
//!
//! [`Worker::spawn`] starts the worker command contained (see the private
//! `worker_spawn` and `worker_kill` modules) and initializes it with a
//! validated policy (DESIGN §17.2). Each request then runs under an absolute
//! deadline — the policy's wall time unless the caller gives one — that
//! also covers the host calls the worker makes while it runs (DESIGN §17.6).
//! The calling thread does all the waiting itself, in one `ppoll` over the
//! worker's output, its pidfd, the cancellation token and the deadline (see
//! the private `transport` module, DESIGN §17.3); no thread is started.
//!
//! # Failure handling (DESIGN §17.4)
//!
//! On a deadline, a cancellation, a crash or exit, a malformed, oversized or
//! truncated frame, a wrong version, an identity mismatch or any other
//! session violation, the handle, in this order: closes the worker's stdin;
//! sends one `SIGKILL` to the worker's process group while the worker is
//! still unreaped; waits (pidfd) for the worker to die and reaps it; drains
//! the response pipe until end of file, which proves that no process of the
//! group still holds it (bounded by [`PIPE_RELEASE_WAIT`]); marks itself
//! poisoned; and returns a typed [`Error`] whose context says what happened,
//! with any cleanup failure appended as context. Every later call fails at
//! once with [`ErrorClass::Unavailable`]. Dropping the handle does the same
//! kill, reap and drain.
//!
//! A guest error (a well-formed error response) is not a failure of the
//! worker: it is returned as [`ErrorClass::Guest`] and the worker stays usable.
//!
//! What this module is not: a pool, a restart policy or a plugin lifecycle.
//! Those (the [`crate::lifecycle`] module, DESIGN §17.7) wrap [`Worker`]
//! values; a poisoned worker is never reused, a new one is spawned.

//!
//! Submodules, one job each: `config` ([`WorkerConfig`] and the supervision
//! constants), `request` (one request's exchange and the mapping of its
//! failures to errors) and, with the `tokio` feature, `tokio_worker` (the
//! same supervision for async hosts).

mod config;
mod request;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio_worker;
mod typed;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::ParentConnection;
use quirl_lua_protocol::records::{
    ContributionKind, ErrorCode, EventHandlerReport, ExecutionContext, ExecutionOutcome,
    ExtensionEvent, Operation, OperationResult, PluginRegistrations, Policy, QuirlConfig,
};
use serde_json::Value;

use crate::callback_deadline::{CallbackDeadlines, callback_deadline};
use crate::child_process::poll;
use crate::child_process::transport::Transport;
use crate::child_process::worker_kill::{WorkerProcess, describe_status};
use crate::child_process::worker_spawn;
use crate::error::{Error, ErrorClass};
use crate::process_host::{Cancel, ProcessHostConfig};

pub use config::{
    DEFAULT_STARTUP_TIMEOUT, PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, WORKER_PIDS_MAX, WorkerConfig,
    worker_memory_max,
};
use request::{Waiting, check_idle, run_request, violation};

/// A supervised worker process.
pub struct Worker {
    live: Option<Live>,
    poisoned_by: Option<(ErrorClass, String)>,
    cancel: Cancel,
    /// The worker's registration with `cancel`: readable once it fires.
    cancel_wake: Box<dyn AsFd + Send + Sync>,
    policy: Policy,
    process_host: ProcessHostConfig,
    pid: u32,
    /// Deadlines declared by the plugin this worker loaded (DESIGN §17.6).
    callbacks: CallbackDeadlines,
    cgroup_contained: bool,
}

/// The parts that exist only while the worker runs.
pub(super) struct Live {
    pub(super) process: WorkerProcess,
    pub(super) transport: Transport,
    pub(super) connection: ParentConnection,
    /// The last response was a guest error: a worker may retire its VM
    /// after one (the reference worker does after a tripped budget) and exit.
    pub(super) after_guest_error: bool,
}

/// What the request in flight is, for error context.
#[derive(Clone, Copy)]
pub(super) struct Flight {
    pub(super) id: u64,
    pub(super) operation: &'static str,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
}

impl Worker {
    /// Spawn the worker and initialize it; the worker is ready on success.
    ///
    /// Any failure kills and reaps whatever was started.
    pub fn spawn(config: WorkerConfig) -> Result<Self, Error> {
        let process_host = config.process_host_config()?;
        let cancel = config.cancel.clone().unwrap_or_default();
        let registration = cancel.register().map_err(|error| {
            Error::new(
                ErrorClass::Spawn,
                ErrorCode::ProcessSpawn,
                "could not create a cancellation wake pipe",
            )
            .with_context(error.to_string())
        })?;
        let cancel_wake: Box<dyn AsFd + Send + Sync> = Box::new(registration);
        let cgroup = config.worker_cgroup()?;
        let cgroup_contained = cgroup.is_some();
        let spawned =
            worker_spawn::spawn(&config.command, &config.limits, cgroup).map_err(|error| {
                Error::new(
                    ErrorClass::Spawn,
                    ErrorCode::ProcessSpawn,
                    "could not start the Lua worker",
                )
                .with_context(format!("worker command `{}`: {error}", config.command))
                .with_help("check the worker command (--worker or QUIRL_LUA_WORKER)")
            })?;
        let pid = spawned.process.pid();
        let mut worker = Self {
            live: Some(Live {
                process: spawned.process,
                transport: Transport::new(spawned.input, spawned.output),
                connection: ParentConnection::new(),
                after_guest_error: false,
            }),
            poisoned_by: None,
            cancel,
            cancel_wake,
            policy: config.policy,
            process_host,
            pid,
            callbacks: CallbackDeadlines::default(),
            cgroup_contained,
        };
        let initialize =
            Operation::initialize(config.policy, config.grants.clone(), config.process_enabled);
        let started = Instant::now();
        match worker.exchange(initialize, started, started + config.startup_timeout) {
            Ok(_) => Ok(worker),
            Err(error) if error.class() == ErrorClass::Guest => {
                let error = error
                    .with_class(ErrorClass::Spawn)
                    .with_context("the worker refused initialize");
                Err(worker.fail(error))
            }
            Err(error) => Err(error.with_context("while initializing the worker")),
        }
    }

    /// Run one operation under `deadline` (default: now plus the policy's
    /// wall time) and return its result, re-validated for that operation.
    pub fn call(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        let started = Instant::now();
        let deadline = deadline.unwrap_or_else(|| started + self.wall_time());
        self.exchange(operation, started, deadline)
    }

    /// Run a callback under its declared deadline plus the slack (capped by
    /// the policy's wall time; DESIGN §17.6). `None`: no declaration known,
    /// the request's own deadline applies.
    fn call_callback(
        &mut self,
        operation: Operation,
        declared: Option<Duration>,
    ) -> Result<OperationResult, Error> {
        let started = Instant::now();
        let request = started + self.wall_time();
        let deadline = declared.map_or(request, |d| callback_deadline(started, d, request));
        self.exchange(operation, started, deadline)
    }

    /// Run one typed request (see [`typed`]) and take its result out.
    fn typed<T>(&mut self, request: typed::Typed<T>) -> Result<T, Error> {
        let result = match request.under {
            typed::Under::Request => self.call(request.operation, None)?,
            typed::Under::Callback(declared) => self.call_callback(request.operation, declared)?,
        };
        (request.take)(result).map_err(|other| self.mis_shaped(&other))
    }

    /// Evaluate a Lua chunk and return its value.
    pub fn eval(&mut self, source: &str) -> Result<Value, Error> {
        self.typed(typed::eval(source))
    }

    /// Check that a source compiles, without running it.
    pub fn check(&mut self, source: &str, source_name: &str) -> Result<(), Error> {
        self.typed(typed::check(source, source_name))
    }

    /// Evaluate a configuration file's source.
    pub fn load_config(&mut self, source: &str, source_name: &str) -> Result<QuirlConfig, Error> {
        self.typed(typed::load_config(source, source_name))
    }

    /// Load a plugin and return what it registered.
    pub fn load_plugin(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<PluginRegistrations, Error> {
        let registrations = self.typed(typed::load_plugin(source, source_name))?;
        self.callbacks = CallbackDeadlines::new(&registrations);
        Ok(registrations)
    }

    /// Render a registered prompt segment (`None`: the segment chose not to render).
    pub fn render_prompt(&mut self, name: &str, context: Value) -> Result<Option<String>, Error> {
        self.typed(typed::render_prompt(&self.callbacks, name, context))
    }

    /// Ask a registered completion provider.
    pub fn complete(&mut self, command: &str, context: Value) -> Result<Value, Error> {
        self.typed(typed::complete(command, context))
    }

    /// Invoke a registered contribution.
    pub fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        self.typed(typed::contribution(&self.callbacks, kind, name, context))
    }

    /// Run a runner module with an execution context.
    pub fn run(
        &mut self,
        source: &str,
        source_name: &str,
        context: ExecutionContext,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(typed::run(source, source_name, context))
    }

    /// Run a registered plugin command. `timeout` is the command's own
    /// deadline (`deadline_ms`, sent to the worker); the parent kills the
    /// worker at that deadline plus the callback slack (DESIGN §17.6).
    pub fn plugin_command(
        &mut self,
        name: &str,
        context: ExecutionContext,
        timeout: Duration,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(typed::plugin_command(name, context, timeout))
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub fn event(&mut self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        self.typed(typed::event(&self.callbacks, event))
    }

    /// Run a test file and return how many tests ran.
    pub fn test(&mut self, source: &str, source_name: &str) -> Result<u64, Error> {
        self.typed(typed::test(source, source_name))
    }

    fn wall_time(&self) -> Duration {
        Duration::from_millis(self.policy.wall_time_ms())
    }

    /// Unreachable in practice: the session decodes each result for the
    /// operation in flight. Kept as a typed error rather than a panic.
    fn mis_shaped(&mut self, result: &OperationResult) -> Error {
        let error = typed::mis_shaped(result);
        self.fail(error)
    }

    /// A clone of the token that cancels this worker's requests.
    ///
    /// Cancelling kills the worker (like a missed deadline) and poisons the
    /// handle; the token stays cancelled.
    pub fn cancel_token(&self) -> Cancel {
        self.cancel.clone()
    }

    /// The worker's process id (also its process-group and session id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `cgroup` when the worker runs in a cgroup of its own, otherwise
    /// `process-group` (DESIGN §17.2–17.3).
    pub fn containment_mode(&self) -> &'static str {
        crate::cgroup::Containment::in_effect(self.cgroup_contained).as_str()
    }

    /// Whether an earlier failure ended this worker.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned_by.is_some()
    }

    /// Wait until `until` for the worker process to exit by itself (e.g.
    /// after retiring its VM, DESIGN §15.8); whether it has. Reaps nothing:
    /// dropping the handle does. `false` without a pidfd to wait on.
    pub(crate) fn wait_for_exit(&self, until: Instant) -> bool {
        let Some(live) = self.live.as_ref() else {
            return true;
        };
        live.process.exit_fd().is_some_and(|fd| {
            let mut fds = [poll::interest(fd, poll::PollFlags::IN)];
            matches!(poll::wait_until(&mut fds, until), Ok(true))
        })
    }

    /// The policy the worker was initialized with.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// End the worker cleanly: close its input, give it [`SHUTDOWN_GRACE`]
    /// to exit on its own, then kill whatever is left of its group and reap.
    ///
    /// Returns an error if the worker did not exit with status 0 by itself.
    pub fn shutdown(mut self) -> Result<(), Error> {
        let Some(mut live) = self.live.take() else {
            return Err(self.unavailable());
        };
        self.poisoned_by = Some((
            ErrorClass::Unavailable,
            "the worker was shut down".to_owned(),
        ));
        live.transport.close_input();
        let exited = live.process.exit_fd().map(|fd| {
            let mut fds = [poll::interest(fd, poll::PollFlags::IN)];
            poll::wait_until(&mut fds, Instant::now() + SHUTDOWN_GRACE)
        });
        let (status, problems) = retire(live);
        let clean = matches!(exited, None | Some(Ok(true))) && status.is_some_and(|s| s.success());
        if clean && problems.is_empty() {
            return Ok(());
        }
        Err(unclean_exit(self.pid, status, problems))
    }

    fn unavailable(&self) -> Error {
        let mut error = Error::new(
            ErrorClass::Unavailable,
            ErrorCode::Lua,
            "the Lua worker is unavailable",
        )
        .with_help("start a new worker; a failed worker is never reused");
        if let Some((kind, message)) = &self.poisoned_by {
            error = error.with_context(format!(
                "worker {} ended earlier ({kind}): {message}",
                self.pid
            ));
        }
        error
    }

    /// Send one request and wait for its response, answering host calls.
    fn exchange(
        &mut self,
        operation: Operation,
        started: Instant,
        deadline: Instant,
    ) -> Result<OperationResult, Error> {
        let Some(live) = self.live.as_mut() else {
            return Err(self.unavailable());
        };
        let name = operation.kind().as_str();
        let idle = Flight {
            id: live.connection.next_request_id(),
            operation: name,
            started,
            deadline,
        };
        if let Err(failure) = check_idle(live, idle) {
            return Err(self.fail(failure));
        }
        let id = match live.connection.request(operation) {
            Ok(id) => id,
            // The check before the request found the worker silent, so a
            // violation cannot surface here; it would still be one.
            Err(error) if live.connection.poison_cause().is_some() => {
                return Err(self.fail(violation(&error, idle)));
            }
            Err(error) => {
                return Err(Error::new(
                    ErrorClass::InvalidInput,
                    ErrorCode::Validation,
                    "the request was rejected before it was sent",
                )
                .with_context(error.to_string()));
            }
        };
        let flight = Flight {
            id,
            operation: name,
            started,
            deadline,
        };
        let outcome = run_request(
            live,
            Waiting {
                cancel: &self.cancel,
                cancel_wake: self.cancel_wake.as_fd(),
                process_host: &self.process_host,
            },
            flight,
        );
        if let Ok(answered) = &outcome {
            live.after_guest_error = answered.is_err();
        }
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(guest)) => Err(guest),
            Err(failure) => Err(self.fail(failure)),
        }
    }

    /// Kill, reap, drain, poison; return `error` with cleanup context.
    fn fail(&mut self, error: Error) -> Error {
        let mut error = error;
        if let Some(live) = self.live.take() {
            let after_guest_error = live.after_guest_error;
            let (status, problems) = retire(live);
            // A worker that answered with an error and then exited 0 retired
            // its VM on purpose: not a crash, but it cannot serve any more.
            if error.class() == ErrorClass::WorkerCrashed
                && after_guest_error
                && status.is_some_and(|status| status.success())
            {
                error = Error::new(
                    ErrorClass::Unavailable,
                    ErrorCode::Lua,
                    "the Lua worker retired after the previous request's error",
                )
                .with_context(format!(
                    "the worker ended its session after answering with an error ({})",
                    error.record().context.first().map_or("", String::as_str)
                ))
                .with_help("start a new worker; a VM whose limit tripped is not reused");
            }
            match status {
                Some(status) => {
                    error = error.with_context(format!(
                        "worker {} {}",
                        self.pid,
                        describe_status(status)
                    ))
                }
                None => {
                    error = error.with_context(format!("worker {} was not reaped here", self.pid))
                }
            }
            for problem in problems {
                error = error.with_context(format!("cleanup: {problem}"));
            }
        }
        if self.poisoned_by.is_none() {
            self.poisoned_by = Some((error.class(), error.message().to_owned()));
        }
        error
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            let _ = retire(live);
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.pid)
            .field("policy", &self.policy)
            .field("poisoned_by", &self.poisoned_by)
            .finish_non_exhaustive()
    }
}

/// The error of a shutdown that did not end cleanly (both supervisors): the
/// worker's exit status, then each cleanup problem, in the order met.
pub(crate) fn unclean_exit(
    pid: u32,
    status: Option<std::process::ExitStatus>,
    problems: Vec<String>,
) -> Error {
    let mut error = Error::new(
        ErrorClass::WorkerCrashed,
        ErrorCode::Lua,
        "the Lua worker did not exit cleanly",
    );
    if let Some(status) = status {
        error = error.with_context(format!("worker {pid} {}", describe_status(status)));
    }
    for problem in problems {
        error = error.with_context(format!("cleanup: {problem}"));
    }
    error
}

/// Close input, kill the group, reap, and wait for the pipe to be released.
fn retire(mut live: Live) -> (Option<std::process::ExitStatus>, Vec<String>) {
    live.transport.close_input();
    let termination = live.process.kill_tree_and_reap();
    let mut problems = termination.problems;
    match live.transport.drain_until_closed(Instant::now() + PIPE_RELEASE_WAIT) {
        Ok(true) => {}
        Ok(false) => problems.push(format!(
            "the response pipe was still open {} ms after the kill: a process outside the worker's process group holds it",
            PIPE_RELEASE_WAIT.as_millis()
        )),
        Err(error) => problems.push(format!("draining the response pipe failed: {error}")),
    }
    (termination.status, problems)
}
