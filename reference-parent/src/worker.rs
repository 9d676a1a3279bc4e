//! The worker handle: one supervised worker process, one request at a time.
//!
//! [`Worker::spawn`] starts the worker command contained (see
//! the private `containment` module) and initializes it with a validated policy. Each
//! request then runs under an absolute deadline — the policy's wall time
//! unless the caller gives one — that also covers the host calls the worker
//! makes while it runs. The calling thread does all the waiting itself, in
//! one `ppoll` over the worker's output, its pidfd, the cancellation token and
//! the deadline (see the private `transport` module); no thread is started.
//!
//! # Failure handling
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
//! once with [`ErrorKind::Unavailable`]. Dropping the handle does the same
//! kill, reap and drain.
//!
//! A guest error (a well-formed error response) is not a failure of the
//! worker: it is returned as [`ErrorKind::Guest`] and the worker stays usable.
//!
//! What this module is not: a pool, a restart policy or a plugin lifecycle.
//! Those (issue 6) wrap [`Worker`] values; a poisoned worker is never reused,
//! a new one is spawned.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use quirl_lua_protocol::{
    ContributionKind, ErrorCode, ErrorKind as ProtocolErrorKind, EventHandlerReport,
    ExecutionContext, ExecutionOutcome, ExtensionEvent, Operation, OperationResult,
    ParentConnection, ParentEvent, PluginRegistrations, Policy, ProtocolError, QuirlConfig,
};
use serde_json::Value;

use crate::callback_deadline::{COMPLETION_DEADLINE, CallbackDeadlines, callback_deadline};
use crate::cgroup::{self, CgroupLimits, ChildCgroup, ChildKind, Containment};
use crate::command::WorkerCommand;
use crate::containment::{self, WorkerProcess, describe_status};
use crate::error::{Error, ErrorKind};
use crate::host;
use crate::process_host::{Cancel, Environment, Grants, ProcessAccess, ProcessHostConfig};
use crate::rlimits::WorkerLimits;
use crate::transport::{Interrupt, Transport, Watch};

/// How long spawn + `initialize` may take by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, after the kill, the parent waits for every holder of the
/// response pipe to be gone before reporting an escaped holder.
pub const PIPE_RELEASE_WAIT: Duration = Duration::from_millis(500);

/// How long [`Worker::shutdown`] lets a worker exit on its own after its
/// input is closed, before it is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// `pids.max` of a worker's cgroup (SPEC §17.2): the reference worker is
/// one single-threaded process; a worker command given by the operator may
/// start a few helpers, and a fork bomb stops here.
pub const WORKER_PIDS_MAX: u64 = 64;

/// `memory.max` of a worker's cgroup for `policy` (SPEC §17.2): the same
/// derivation as the address-space limit, `2 × memory_limit_bytes +
/// 256 MiB` (see [`crate::rlimits`]). The VM's allocator stops the Lua heap
/// at `memory_limit_bytes` first; this is the second fence behind it. It
/// never binds a single process before `RLIMIT_AS` would (resident memory
/// is at most the address space), but it binds the *sum* over every process
/// of the worker's cgroup, and the kernel memory and page cache charged to
/// it, which no per-process limit does.
pub fn worker_memory_max(policy: &Policy) -> u64 {
    policy
        .memory_limit_bytes()
        .saturating_mul(2)
        .saturating_add(crate::rlimits::ADDRESS_SPACE_MARGIN_BYTES)
}

/// Everything needed to start and initialize a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    command: WorkerCommand,
    policy: Policy,
    grants: Option<Vec<String>>,
    process_enabled: bool,
    startup_timeout: Duration,
    cancel: Option<Cancel>,
    process_host: Option<ProcessHostConfig>,
    limits: WorkerLimits,
    containment: Containment,
    command_pids_max: Option<u64>,
}

impl WorkerConfig {
    /// Run `command` under `policy`; process access follows
    /// `policy.allow_process()` and no grants are sent.
    pub fn new(command: WorkerCommand, policy: Policy) -> Self {
        Self {
            command,
            process_enabled: policy.allow_process(),
            policy,
            grants: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            cancel: None,
            process_host: None,
            limits: WorkerLimits::for_policy(&policy),
            containment: Containment::Auto,
            command_pids_max: Some(crate::process_host::DEFAULT_COMMAND_PIDS_MAX),
        }
    }

    /// `pids.max` of each host command's cgroup in the default process-host
    /// configuration (see [`ProcessHostConfig::command_pids_max`]).
    #[must_use]
    pub fn command_pids_max(mut self, count: Option<u64>) -> Self {
        self.command_pids_max = count;
        self
    }

    /// How the worker and its host commands are contained (default
    /// [`Containment::Auto`]: a cgroup each when cgroup v2 is writable,
    /// process groups otherwise; SPEC §17.2–17.3).
    #[must_use]
    pub fn containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// The containment this config asks for.
    pub fn configured_containment(&self) -> Containment {
        self.containment
    }

    /// The worker's own cgroup, in cgroup mode.
    fn worker_cgroup(&self) -> Result<Option<ChildCgroup>, Error> {
        let failed = |why: String| {
            Error::new(
                ErrorKind::Spawn,
                ErrorCode::ProcessSpawn,
                "could not contain the Lua worker in a cgroup",
            )
            .with_context(why)
            .with_help("use --containment process-group (or auto) where cgroup v2 is not writable")
        };
        let Some(hierarchy) = cgroup::resolve(self.containment).map_err(failed)? else {
            return Ok(None);
        };
        let limits = CgroupLimits {
            memory_max: Some(worker_memory_max(&self.policy)),
            pids_max: Some(WORKER_PIDS_MAX),
        };
        ChildCgroup::create(hierarchy, ChildKind::Worker, limits)
            .map(Some)
            .map_err(|error| failed(format!("creating the worker's cgroup failed: {error}")))
    }

    /// Resource limits of the worker process (default:
    /// [`WorkerLimits::for_policy`] of this config's policy).
    #[must_use]
    pub fn limits(mut self, limits: WorkerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Capability grants sent with `initialize` (e.g. `process.spawn:echo`).
    #[must_use]
    pub fn grants(mut self, grants: Vec<String>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// Whether the parent offers a process host to this worker.
    ///
    /// Host calls are accepted only when this is true *and* the policy
    /// allows processes; any other host call is a protocol violation.
    #[must_use]
    pub fn process_enabled(mut self, enabled: bool) -> Self {
        self.process_enabled = enabled;
        self
    }

    /// Deadline for spawning and initializing the worker.
    #[must_use]
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Observe this token (e.g. one shared by several workers) instead of a
    /// fresh one.
    #[must_use]
    pub fn cancel_token(mut self, token: Cancel) -> Self {
        self.cancel = Some(token);
        self
    }

    /// The token set with [`cancel_token`](Self::cancel_token), if any
    /// (pools adopt it as their own).
    pub fn configured_cancel_token(&self) -> Option<&Cancel> {
        self.cancel.as_ref()
    }

    /// Run host calls with this process-host configuration.
    ///
    /// Default: access from the policy and `process_enabled`, the program
    /// grants among [`grants`](Self::grants) (`process.spawn:NAME`), `PATH`
    /// and `HOME` from this process, and this process's working directory.
    #[must_use]
    pub fn process_host(mut self, config: ProcessHostConfig) -> Self {
        self.process_host = Some(config);
        self
    }

    fn process_host_config(&self) -> Result<ProcessHostConfig, Error> {
        if let Some(config) = &self.process_host {
            return Ok(config.clone());
        }
        let invalid = |error: crate::process_host::HostError| {
            let mut wrapped = Error::new(
                ErrorKind::InvalidInput,
                ErrorCode::InvalidArgument,
                "invalid process-host configuration (grants or working directory)",
            )
            .with_context(error.to_string());
            for context in error.context() {
                wrapped = wrapped.with_context(context.clone());
            }
            for help in error.help() {
                wrapped = wrapped.with_help(help.clone());
            }
            wrapped.with_help("grant programs as process.spawn:NAME")
        };
        let grants = Grants::parse(self.grants.iter().flatten()).map_err(invalid)?;
        let access = ProcessAccess {
            allow_process: self.policy.allow_process(),
            process_enabled: self.process_enabled,
        };
        if !(access.allow_process && access.process_enabled) {
            return Ok(ProcessHostConfig::disabled());
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        ProcessHostConfig::new(access, grants, Environment::from_parent(), cwd)
            .map(|config| {
                config
                    .containment(self.containment)
                    .command_pids_max(self.command_pids_max)
            })
            .map_err(invalid)
    }
}

/// A supervised worker process.
pub struct Worker {
    live: Option<Live>,
    poisoned_by: Option<(ErrorKind, String)>,
    cancel: Cancel,
    /// The worker's registration with `cancel`: readable once it fires.
    cancel_wake: Box<dyn AsFd + Send + Sync>,
    policy: Policy,
    process_host: ProcessHostConfig,
    pid: u32,
    /// Deadlines declared by the plugin this worker loaded (SPEC §17.6).
    callbacks: CallbackDeadlines,
    cgroup_contained: bool,
}

/// The parts that exist only while the worker runs.
struct Live {
    process: WorkerProcess,
    transport: Transport,
    connection: ParentConnection,
    /// The last response was a guest error: a worker may retire its VM
    /// after one (the reference worker does after a tripped budget) and exit.
    after_guest_error: bool,
}

/// What the request in flight is, for error context.
#[derive(Clone, Copy)]
struct Flight {
    id: u64,
    operation: &'static str,
    started: Instant,
    deadline: Instant,
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
                ErrorKind::Spawn,
                ErrorCode::ProcessSpawn,
                "could not create a cancellation wake pipe",
            )
            .with_context(error.to_string())
        })?;
        let cancel_wake: Box<dyn AsFd + Send + Sync> = Box::new(registration);
        let cgroup = config.worker_cgroup()?;
        let cgroup_contained = cgroup.is_some();
        let spawned =
            containment::spawn(&config.command, &config.limits, cgroup).map_err(|error| {
                Error::new(
                    ErrorKind::Spawn,
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
            Err(error) if error.kind() == ErrorKind::Guest => {
                let error = error
                    .with_kind(ErrorKind::Spawn)
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
    /// the policy's wall time; SPEC §17.6). `None`: no declaration known,
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

    /// Evaluate a Lua chunk and return its value.
    pub fn eval(&mut self, source: &str) -> Result<Value, Error> {
        let operation = Operation::Eval {
            source: source.to_owned(),
        };
        match self.call(operation, None)? {
            OperationResult::Value(value) => Ok(value),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Check that a source compiles, without running it.
    pub fn check(&mut self, source: &str, source_name: &str) -> Result<(), Error> {
        let operation = Operation::Check {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        };
        match self.call(operation, None)? {
            OperationResult::Null => Ok(()),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Evaluate a configuration file's source.
    pub fn load_config(&mut self, source: &str, source_name: &str) -> Result<QuirlConfig, Error> {
        let operation = Operation::LoadConfig {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        };
        match self.call(operation, None)? {
            OperationResult::Config(config) => Ok(config),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Load a plugin and return what it registered.
    pub fn load_plugin(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<PluginRegistrations, Error> {
        let operation = Operation::LoadPlugin {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        };
        match self.call(operation, None)? {
            OperationResult::Plugin(registrations) => {
                self.callbacks = CallbackDeadlines::new(&registrations);
                Ok(registrations)
            }
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Render a registered prompt segment (`None`: the segment chose not to render).
    pub fn render_prompt(&mut self, name: &str, context: Value) -> Result<Option<String>, Error> {
        let operation = Operation::RenderPrompt {
            name: name.to_owned(),
            context,
        };
        let declared = self.callbacks.prompt(name);
        match self.call_callback(operation, declared)? {
            OperationResult::Prompt(text) => Ok(text),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Ask a registered completion provider.
    pub fn complete(&mut self, command: &str, context: Value) -> Result<Value, Error> {
        let operation = Operation::Complete {
            command: command.to_owned(),
            context,
        };
        match self.call_callback(operation, Some(COMPLETION_DEADLINE))? {
            OperationResult::Value(value) => Ok(value),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Invoke a registered contribution.
    pub fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        let declared = self.callbacks.contribution(kind, name);
        let operation = Operation::Contribution {
            kind,
            name: name.to_owned(),
            context,
        };
        match self.call_callback(operation, declared)? {
            OperationResult::Value(value) => Ok(value),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Run a runner module with an execution context.
    pub fn run(
        &mut self,
        source: &str,
        source_name: &str,
        context: ExecutionContext,
    ) -> Result<ExecutionOutcome, Error> {
        let operation = Operation::Run {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
            context,
        };
        match self.call(operation, None)? {
            OperationResult::Outcome(outcome) => Ok(outcome),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Run a registered plugin command. `timeout` is the command's own
    /// deadline (`deadline_ms`, sent to the worker); the parent kills the
    /// worker at that deadline plus the callback slack (SPEC §17.6).
    pub fn plugin_command(
        &mut self,
        name: &str,
        context: ExecutionContext,
        timeout: Duration,
    ) -> Result<ExecutionOutcome, Error> {
        let deadline_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let operation = Operation::PluginCommand {
            name: name.to_owned(),
            context,
            deadline_ms,
        };
        match self.call_callback(operation, Some(Duration::from_millis(deadline_ms)))? {
            OperationResult::Outcome(outcome) => Ok(outcome),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub fn event(&mut self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        let declared = self.callbacks.event(&event);
        match self.call_callback(Operation::Event { event }, declared)? {
            OperationResult::Reports(reports) => Ok(reports),
            other => Err(self.mis_shaped(&other)),
        }
    }

    /// Run a test file and return how many tests ran.
    pub fn test(&mut self, source: &str, source_name: &str) -> Result<u64, Error> {
        let operation = Operation::Test {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        };
        match self.call(operation, None)? {
            OperationResult::TestCount(count) => Ok(count),
            other => Err(self.mis_shaped(&other)),
        }
    }

    fn wall_time(&self) -> Duration {
        Duration::from_millis(self.policy.wall_time_ms())
    }

    /// Unreachable in practice: the session decodes each result for the
    /// operation in flight. Kept as a typed error rather than a panic.
    fn mis_shaped(&mut self, result: &OperationResult) -> Error {
        let error = Error::new(
            ErrorKind::ProtocolViolation,
            ErrorCode::Validation,
            "the Lua worker's result does not fit the operation",
        )
        .with_context(format!("result: {result:?}"));
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
    /// `process-group` (SPEC §17.2–17.3).
    pub fn containment_mode(&self) -> &'static str {
        if self.cgroup_contained {
            "cgroup"
        } else {
            "process-group"
        }
    }

    /// Whether an earlier failure ended this worker.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned_by.is_some()
    }

    /// Wait until `until` for the worker process to exit by itself (e.g.
    /// after retiring its VM, SPEC §15.8); whether it has. Reaps nothing:
    /// dropping the handle does. `false` without a pidfd to wait on.
    pub(crate) fn wait_for_exit(&self, until: Instant) -> bool {
        let Some(live) = self.live.as_ref() else {
            return true;
        };
        live.process.exit_fd().is_some_and(|fd| {
            let mut fds = [crate::poll::interest(fd, libc::POLLIN)];
            matches!(crate::poll::wait_until(&mut fds, until), Ok(true))
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
            ErrorKind::Unavailable,
            "the worker was shut down".to_owned(),
        ));
        live.transport.close_input();
        let exited = live.process.exit_fd().map(|fd| {
            let mut fds = [crate::poll::interest(fd, libc::POLLIN)];
            crate::poll::wait_until(&mut fds, Instant::now() + SHUTDOWN_GRACE)
        });
        let (status, problems) = retire(live);
        let clean = matches!(exited, None | Some(Ok(true))) && status.is_some_and(|s| s.success());
        if clean && problems.is_empty() {
            return Ok(());
        }
        let mut error = Error::new(
            ErrorKind::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker did not exit cleanly",
        );
        if let Some(status) = status {
            error = error.with_context(format!("worker {} {}", self.pid, describe_status(status)));
        }
        for problem in problems {
            error = error.with_context(format!("cleanup: {problem}"));
        }
        Err(error)
    }

    fn unavailable(&self) -> Error {
        let mut error = Error::new(
            ErrorKind::Unavailable,
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
                    ErrorKind::InvalidInput,
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
            if error.kind() == ErrorKind::WorkerCrashed
                && after_guest_error
                && status.is_some_and(|status| status.success())
            {
                error = Error::new(
                    ErrorKind::Unavailable,
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
            self.poisoned_by = Some((error.kind(), error.message().to_owned()));
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

/// The request loop. `Ok(Ok)` = result, `Ok(Err)` = guest error (worker
/// healthy), `Err` = failure that must kill and poison.
/// Before a request is sent the worker must have said nothing since its last
/// response: a frame (or part of one) that arrived while no request was in
/// flight is an `unexpected_frame` violation, and a closed stream is a crash
/// noticed before any work is sent. One non-blocking `read` (usually
/// `EAGAIN`).
fn check_idle(live: &mut Live, flight: Flight) -> Result<(), Error> {
    let Live {
        transport,
        connection,
        ..
    } = live;
    check_quiet(
        transport,
        connection,
        flight,
        "while no request was in flight",
    )
}

/// Fail with `unexpected_frame` if the worker sent anything (bytes that
/// arrived now, or bytes left over from an earlier read) at a moment when
/// it must be silent: between requests, or while its host call is pending
/// (§9.2, §9.3).
fn check_quiet(
    transport: &mut Transport,
    connection: &mut ParentConnection,
    flight: Flight,
    when: &str,
) -> Result<(), Error> {
    let arrived = match transport.read_available() {
        Ok(None) => 0,
        Ok(Some(bytes)) => {
            connection
                .feed(bytes)
                .map_err(|error| violation(&error, flight))?;
            bytes.len()
        }
        Err(interrupt) => return Err(interrupted(interrupt, connection, flight)),
    };
    // Bytes may also be left over from the read that carried the last
    // frame.
    if arrived == 0 && connection.is_quiet() {
        return Ok(());
    }
    let error = match connection.poll_event() {
        Err(error) => error,
        Ok(_) => ProtocolError::new(
            ProtocolErrorKind::UnexpectedFrame,
            format!("the worker sent bytes {when}"),
        ),
    };
    Err(violation(&error, flight))
}

/// What a request waits on besides the worker, borrowed from the handle.
#[derive(Clone, Copy)]
struct Waiting<'a> {
    cancel: &'a Cancel,
    cancel_wake: std::os::fd::BorrowedFd<'a>,
    process_host: &'a ProcessHostConfig,
}

fn run_request(
    live: &mut Live,
    waiting: Waiting<'_>,
    flight: Flight,
) -> Result<Result<OperationResult, Error>, Error> {
    let Live {
        process,
        transport,
        connection,
        ..
    } = live;
    let watch = Watch {
        deadline: flight.deadline,
        cancel: waiting.cancel,
        cancel_wake: waiting.cancel_wake,
        exit: process.exit_fd(),
    };
    transport
        .write_all(&connection.take_outgoing(), watch)
        .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
    loop {
        let event = loop {
            match connection.poll_event() {
                Ok(Some(event)) => break event,
                Ok(None) => {}
                Err(error) => return Err(violation(&error, flight)),
            }
            let chunk = transport
                .read_chunk(watch)
                .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
            connection
                .feed(chunk)
                .map_err(|error| violation(&error, flight))?;
        };
        match event {
            ParentEvent::Response {
                result: Ok(value), ..
            } => return Ok(Ok(value)),
            ParentEvent::Response {
                result: Err(record),
                ..
            } => {
                return Ok(Err(Error::guest(record)));
            }
            ParentEvent::HostCall(call) => {
                let answer = host::run_host_call(
                    &call,
                    waiting.process_host,
                    flight.deadline,
                    waiting.cancel,
                );
                // A cancellation or deadline that ended the command also ends the request.
                if waiting.cancel.is_cancelled() {
                    return Err(interrupted(Interrupt::Cancelled, connection, flight));
                }
                if Instant::now() >= flight.deadline {
                    return Err(interrupted(Interrupt::Deadline, connection, flight));
                }
                // While its host call is pending the worker must send nothing.
                check_quiet(
                    transport,
                    connection,
                    flight,
                    "while its host call was pending",
                )?;
                connection
                    .host_response(answer)
                    .map_err(|error| violation(&error, flight))?;
                transport
                    .write_all(&connection.take_outgoing(), watch)
                    .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
            }
            other => {
                let error = ProtocolError::new(
                    ProtocolErrorKind::UnexpectedFrame,
                    format!("an event this parent does not handle: {other:?}"),
                );
                return Err(violation(&error, flight));
            }
        }
    }
}

/// The violation in how the worker's stream ended, if any (SPEC §9.5): a
/// stream cut inside a frame. An end at a frame boundary is no violation
/// here: mid-request (`unexpected_end`) it is the crash the caller reports.
fn stream_end_violation(connection: &mut ParentConnection) -> Option<ProtocolError> {
    loop {
        match connection.poll_event() {
            // Every complete frame was handled before the read that ended
            // the stream; one arriving with the end changes nothing.
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(error) => return Some(error),
        }
    }
    match connection.end_of_stream() {
        Err(error) if error.kind() != ProtocolErrorKind::UnexpectedEnd => Some(error),
        _ => None,
    }
}

fn describe_flight(flight: Flight) -> String {
    format!("request {} ({})", flight.id, flight.operation)
}

fn violation(error: &ProtocolError, flight: Flight) -> Error {
    let code = if error.kind() == ProtocolErrorKind::OversizedFrame {
        ErrorCode::ResourceLimit
    } else {
        ErrorCode::Validation
    };
    Error::new(
        ErrorKind::ProtocolViolation,
        code,
        "the Lua worker violated the protocol",
    )
    .with_protocol_kind(error.kind())
    .with_context(format!("protocol error: {error}"))
    .with_context(format!("during {}", describe_flight(flight)))
    .with_help("the worker was killed; report this if it is the reference worker")
}

fn interrupted(interrupt: Interrupt, connection: &mut ParentConnection, flight: Flight) -> Error {
    let budget = flight
        .deadline
        .saturating_duration_since(flight.started)
        .as_millis();
    match interrupt {
        Interrupt::Deadline => Error::new(
            ErrorKind::Deadline,
            ErrorCode::ResourceLimit,
            "the Lua request exceeded its deadline",
        )
        .with_context(format!(
            "deadline {budget} ms after {} started",
            describe_flight(flight)
        ))
        .with_help("reduce the work or raise --wall-time-ms; the worker was killed"),
        Interrupt::Cancelled => Error::new(
            ErrorKind::Cancelled,
            ErrorCode::ResourceLimit,
            "the Lua request was cancelled",
        )
        .with_context(format!(
            "cancelled {} ms into {}",
            flight.started.elapsed().as_millis(),
            describe_flight(flight)
        ))
        .with_help("the worker was killed; start a new one"),
        Interrupt::WorkerExited | Interrupt::OutputClosed | Interrupt::InputClosed => {
            if let Some(error) = stream_end_violation(connection) {
                return violation(&error, flight);
            }
            let how = match interrupt {
                Interrupt::WorkerExited => "the worker process exited",
                Interrupt::OutputClosed => "the worker closed its response stream",
                _ => "the worker closed its input",
            };
            Error::new(
                ErrorKind::WorkerCrashed,
                ErrorCode::Lua,
                "the Lua worker ended without answering",
            )
            .with_context(format!("{how} during {}", describe_flight(flight)))
            .with_help("the worker crashed or exited; start a new one")
        }
        Interrupt::Io(error) => Error::new(
            ErrorKind::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker's pipes failed",
        )
        .with_context(format!("{error} during {}", describe_flight(flight)))
        .with_help("the worker was killed; start a new one"),
    }
}
