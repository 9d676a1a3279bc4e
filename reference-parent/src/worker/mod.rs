//! The blocking driver: [`Worker`], one supervised worker slot on the
//! caller's thread.
//!
//! Every decision is the supervision core's (`crate::supervision`: the
//! request's steps, how it ended, when a worker retires); this file does
//! the I/O. [`Worker::spawn`] starts the worker command contained (the
//! private `worker_spawn` and `worker_kill` modules, DESIGN §17.2) and
//! initializes it with a validated policy. Each request then runs under an
//! absolute deadline — the policy's wall time unless the caller gives one —
//! that also covers the host calls the worker makes while it runs (DESIGN
//! §17.6). The calling thread does all the waiting itself, in one `ppoll`
//! over the worker's output, its pidfd, the cancellation token and the
//! deadline (the private `transport` module, DESIGN §17.3); no thread is
//! started. A host call is answered by the configured process host on the
//! same thread, under a token that also fires when the worker dies, so a
//! worker killed while its host command runs is reported as a crash at
//! once (DESIGN §17.6).
//!
//! # Failure and retirement (DESIGN §17.4)
//!
//! On a deadline, a cancellation, a crash or exit, a malformed, oversized or
//! truncated frame, a wrong version, an identity mismatch or any other
//! session violation, the handle, in this order: closes the worker's stdin;
//! kills the worker's whole tree while the worker is still unreaped; reaps
//! it; drains the response pipe until end of file (bounded by
//! [`PIPE_RELEASE_WAIT`]); and returns a typed [`Error`] whose context says
//! what happened, with any cleanup failure appended. After a tripped limit
//! ([`ErrorClass::Limit`]) it retires the worker the same way: a VM whose
//! limit tripped is never reused (SPEC §13.1).
//!
//! The handle then has no process. Its next call starts a fresh one from
//! the same configuration and loads the plugin it served again (a
//! *restart*, [`Worker::restarts`]); no call is ever sent into a worker
//! that ended. A worker found dead before a request is sent (killed from
//! outside) is replaced the same way before anything is sent. Globals a
//! chunk set in the old VM are gone with it. A guest error
//! ([`ErrorClass::Guest`]) ends nothing: the worker stays in use.
//!
//! What this module is not: a pool, a restart budget or a plugin lifecycle.
//! Those (the [`crate::lifecycle`] module, DESIGN §17.7) hold [`Worker`]
//! values.
//!
//! Submodule: `config` ([`WorkerConfig`] and the supervision constants).

mod config;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::ParentConnection;
use quirl_lua_protocol::records::{
    CheckReport, ContributionKind, ErrorCode, EventHandlerReport, ExecutionContext,
    ExecutionOutcome, ExtensionEvent, Operation, OperationResult, PluginRegistrations, QuirlConfig,
};
use serde_json::Value;

use crate::callback_deadline::callback_deadline;
use crate::cancel::{Cancel, CancelWaiter, WatchedCancel, readable};
use crate::child_process::transport::{Interrupt, Transport, Watch};
use crate::child_process::worker_kill::WorkerProcess;
use crate::child_process::worker_spawn;
use crate::error::{Error, ErrorClass};
use crate::process_host::{ProcessHostConfig, run_host_call};
use crate::supervision::classify::{self, InitializeFailed, WorkerEnd};
use crate::supervision::exchange::{self, Resend, Step};
use crate::supervision::flight::Flight;
use crate::supervision::life::{AfterAnswer, Life, Program};
use crate::supervision::pool::Supervised;
use crate::supervision::typed::{self, Typed, Under};

pub use config::{
    DEFAULT_STARTUP_TIMEOUT, PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, WORKER_PIDS_MAX, WorkerConfig,
    worker_memory_max,
};

/// A supervised worker slot: one worker process at a time, replaced by a
/// fresh one on the next call after it ended (see the module docs).
pub struct Worker {
    config: WorkerConfig,
    process_host: ProcessHostConfig,
    cancel: Cancel,
    /// The handle's registration with `cancel`: readable once it fires.
    cancel_wake: CancelWaiter,
    live: Option<Live>,
    life: Life,
    cgroup_contained: bool,
}

/// The parts that exist only while a worker process runs.
struct Live {
    process: WorkerProcess,
    transport: Transport,
    connection: ParentConnection,
}

impl Worker {
    crate::supervision::life::slot_accessors!();

    /// Spawn the worker and initialize it; the worker is ready on success.
    ///
    /// Any failure kills and reaps whatever was started.
    pub fn spawn(config: WorkerConfig) -> Result<Self, Error> {
        let process_host = config.process_host_config()?;
        let cancel = config.cancel().cloned().unwrap_or_default();
        let cancel_wake = cancel.register().map_err(classify::no_cancel_wake)?;
        let mut worker = Self {
            config,
            process_host,
            cancel,
            cancel_wake,
            live: None,
            life: Life::default(),
            cgroup_contained: false,
        };
        worker.start()?;
        Ok(worker)
    }

    /// Run one operation under `deadline` (default: now plus the policy's
    /// wall time) and return its result, re-validated for that operation.
    pub fn call(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        self.make_ready()?;
        let started = Instant::now();
        let deadline = deadline.unwrap_or_else(|| started + self.wall_time());
        self.exchange(operation, started, deadline)
    }

    /// Run one typed request (see `supervision::typed`) and take its
    /// result out.
    fn typed<T>(&mut self, request: impl FnOnce(&Life) -> Typed<T>) -> Result<T, Error> {
        self.make_ready()?;
        let request = request(&self.life);
        let started = Instant::now();
        let own = started + self.wall_time();
        let deadline = match request.under {
            Under::Request => own,
            Under::Callback(None) => own,
            Under::Callback(Some(declared)) => callback_deadline(started, declared, own),
        };
        let result = self.exchange(request.operation, started, deadline)?;
        (request.take)(result).map_err(|other| self.fail(typed::mis_shaped(&other)))
    }

    /// Evaluate a Lua chunk and return its value.
    pub fn eval(&mut self, source: &str) -> Result<Value, Error> {
        self.typed(|_| typed::eval(source))
    }

    /// Check a source without running it: a compile error is a guest
    /// error; what the worker's lint found is the report, when the
    /// worker was granted `check.diagnostics` (SPEC §7.2; otherwise
    /// the report is empty).
    pub fn check(&mut self, source: &str, source_name: &str) -> Result<CheckReport, Error> {
        self.typed(|_| typed::check(source, source_name))
    }

    /// Evaluate a configuration file's source.
    pub fn load_config(&mut self, source: &str, source_name: &str) -> Result<QuirlConfig, Error> {
        self.typed(|_| typed::load_config(source, source_name))
    }

    /// Load a plugin and return what it registered. From then on the
    /// handle serves this plugin: a fresh worker (after a restart) loads it
    /// again before its first request.
    pub fn load_plugin(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<PluginRegistrations, Error> {
        let registrations = self.typed(|_| typed::load_plugin(source, source_name))?;
        self.life.loaded_plugin(source, source_name, &registrations);
        Ok(registrations)
    }

    /// Render a registered prompt segment (`None`: the segment chose not to render).
    pub fn render_prompt(&mut self, name: &str, context: Value) -> Result<Option<String>, Error> {
        self.typed(|life| typed::render_prompt(life.callbacks(), name, context))
    }

    /// Ask a registered completion provider.
    pub fn complete(&mut self, command: &str, context: Value) -> Result<Value, Error> {
        self.typed(|_| typed::complete(command, context))
    }

    /// Invoke a registered contribution.
    pub fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        self.typed(|life| typed::contribution(life.callbacks(), kind, name, context))
    }

    /// Run a runner module with an execution context.
    pub fn run(
        &mut self,
        source: &str,
        source_name: &str,
        context: ExecutionContext,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(|_| typed::run(source, source_name, context))
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
        self.typed(|_| typed::plugin_command(name, context, timeout))
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub fn event(&mut self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        self.typed(|life| typed::event(life.callbacks(), event))
    }

    /// Run a test file and return how many tests ran.
    pub fn test(&mut self, source: &str, source_name: &str) -> Result<u64, Error> {
        self.typed(|_| typed::test(source, source_name))
    }

    /// End the current worker (if it runs) and start a fresh one from the
    /// same configuration, loading the plugin the handle serves.
    pub fn restart(&mut self) -> Result<(), Error> {
        if let Some(live) = self.live.take() {
            let error = classify::replaced_by_restart();
            let _ = end(live);
            self.life.ended(&error);
        }
        self.start()
    }

    fn wall_time(&self) -> Duration {
        Duration::from_millis(self.config.policy().wall_time_ms())
    }

    /// Whether the current worker process has ended (a failure, or a
    /// retirement after a tripped limit): the next call starts a fresh one.
    pub fn is_poisoned(&self) -> bool {
        !self.life.is_live()
    }

    /// End the worker cleanly: close its input, give it [`SHUTDOWN_GRACE`]
    /// to exit on its own, then kill whatever is left of its group and reap.
    ///
    /// Returns an error if the worker did not exit with status 0 by itself.
    /// A handle whose worker had already ended has nothing left to end.
    pub fn shutdown(mut self) -> Result<(), Error> {
        let Some(mut live) = self.live.take() else {
            return Ok(());
        };
        let pid = live.process.pid();
        live.transport.close_input();
        let exited = live
            .process
            .exit_fd()
            .map(|fd| wait_readable(fd, Instant::now() + SHUTDOWN_GRACE));
        let end = end(live);
        let clean = matches!(exited, None | Some(true)) && end.exited_zero;
        if clean && end.problems.is_empty() {
            return Ok(());
        }
        Err(classify::unclean_exit(pid, end))
    }

    /// Start a fresh worker: spawn, `initialize`, load the slot's plugin.
    /// Any failure kills and reaps what was started.
    fn start(&mut self) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(classify::cancelled_before_start());
        }
        let cgroup = self.config.worker_cgroup()?;
        self.cgroup_contained = cgroup.is_some();
        let spawned = worker_spawn::spawn(self.config.command(), self.config.limits(), cgroup)
            .map_err(|error| classify::spawn_failed(self.config.command(), error))?;
        let pid = spawned.process.pid();
        self.live = Some(Live {
            process: spawned.process,
            transport: Transport::new(spawned.input, spawned.output),
            connection: ParentConnection::new(),
        });
        let initialize = Operation::initialize(
            self.config.policy(),
            self.config.grants().map(<[String]>::to_vec),
            self.config.process_enabled(),
        );
        let started = Instant::now();
        let deadline = started + self.config.startup_timeout();
        if let Err(error) = self.exchange(initialize, started, deadline) {
            return Err(match classify::initialize_failed(error) {
                InitializeFailed::Refused(error) => self.fail(error),
                InitializeFailed::Ended(error) => {
                    self.abandon_start();
                    error
                }
            });
        }
        if let Program::Plugin {
            source,
            source_name,
        } = self.life.program().clone()
        {
            let load = typed::load_plugin(&source, &source_name);
            let started = Instant::now();
            let deadline = started + self.wall_time();
            if let Err(error) = self.exchange(load.operation, started, deadline) {
                let error = classify::replay_failed(error, &source_name);
                return Err(match self.live.is_some() {
                    true => self.fail(error),
                    false => {
                        self.abandon_start();
                        error
                    }
                });
            }
        }
        self.life.started(pid);
        Ok(())
    }

    /// A start failed after the failure already ended the process.
    fn abandon_start(&mut self) {
        if let Some(live) = self.live.take() {
            let _ = end(live);
        }
    }

    /// Before a request: start a worker if the slot has none, or replace
    /// the live one if it was found ended (never send into it). Bytes the
    /// worker sent while idle are fed, so that the request reports them as
    /// the violation they are.
    fn make_ready(&mut self) -> Result<(), Error> {
        if self.life.needs_start() {
            return self.start();
        }
        let Some(live) = self.live.as_mut() else {
            return self.start();
        };
        let exited = live
            .process
            .exit_fd()
            .is_some_and(|fd| readable(fd).unwrap_or(false));
        let read = live.transport.read_available();
        if !classify::ended_between_calls(exited, read, &mut live.connection) {
            return Ok(());
        }
        let Some(live) = self.live.take() else {
            return self.start();
        };
        let may_have_retired = live.connection.may_have_retired();
        let pid = live.process.pid();
        let end = end(live);
        self.life
            .found_ended_between_calls(may_have_retired, pid, end);
        self.start()
    }

    /// Send one request to the live worker and wait for its answer,
    /// answering host calls; retire the worker after a tripped limit, end
    /// it after a failure.
    fn exchange(
        &mut self,
        operation: Operation,
        started: Instant,
        deadline: Instant,
    ) -> Result<OperationResult, Error> {
        let Some(live) = self.live.as_mut() else {
            return Err(self.life_ended_error());
        };
        let resend = Resend::keep(&live.connection, &operation);
        let flight = match exchange::send(&mut live.connection, operation, started, deadline) {
            Ok(flight) => flight,
            Err(error) if error.worker_ended() => return Err(self.fail(error)),
            Err(error) => return Err(error),
        };
        self.life.begin(flight);
        let outcome = self.drive(flight);
        self.life.finish();
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(answer)) => match Life::after_answer(&Err(answer.clone())) {
                AfterAnswer::Keep => Err(answer),
                AfterAnswer::Retire => Err(self.retire(answer)),
            },
            Err(failure) => {
                let unread = self
                    .live
                    .as_ref()
                    .and_then(|live| resend.unread(&live.connection));
                match (unread, self.live.take()) {
                    (Some(operation), Some(live)) => {
                        let pid = live.process.pid();
                        let end = end(live);
                        self.life.found_ended_before_request(true, pid, end);
                        self.start()?;
                        self.exchange(operation, started, deadline)
                    }
                    (_, live) => {
                        self.live = live;
                        Err(self.fail(failure))
                    }
                }
            }
        }
    }

    /// The request loop (DESIGN §17.3): `Ok(Ok)` a result, `Ok(Err)` the
    /// worker's error answer, `Err` a failure that ends the worker.
    fn drive(&mut self, flight: Flight) -> Result<Result<OperationResult, Error>, Error> {
        let Some(live) = self.live.as_mut() else {
            return Err(self.life_ended_error());
        };
        let Live {
            process,
            transport,
            connection,
        } = live;
        let watch = Watch {
            deadline: flight.deadline,
            cancel: &self.cancel,
            cancel_wake: self.cancel_wake.as_fd(),
            exit: process.exit_fd(),
        };
        let interrupted = |interrupt, connection: &mut ParentConnection| {
            classify::interrupted(interrupt, connection, &flight, Instant::now())
        };
        transport
            .write_all(&connection.take_outgoing(), watch)
            .map_err(|interrupt| interrupted(interrupt, connection))?;
        loop {
            match exchange::step(connection, &flight, Instant::now())? {
                Step::Result(result) => return Ok(Ok(result)),
                Step::Answered(error) => return Ok(Err(error)),
                Step::Read => {
                    let chunk = transport
                        .read_chunk(watch)
                        .map_err(|interrupt| interrupted(interrupt, connection))?;
                    exchange::feed(connection, &flight, chunk, Instant::now())?;
                }
                Step::HostCall(call) => {
                    // The command is killed the moment the worker dies
                    // (its pidfd is watched with the token, DESIGN §17.6).
                    let exit: Vec<_> = process.exit_fd().into_iter().collect();
                    let answer = match WatchedCancel::new(&self.cancel, &exit) {
                        Ok(signal) => {
                            run_host_call(&self.process_host, &call, flight.deadline, &signal)
                        }
                        Err(_) => {
                            run_host_call(&self.process_host, &call, flight.deadline, &self.cancel)
                        }
                    };
                    // What ended the call besides itself, as observed.
                    if process
                        .exit_fd()
                        .is_some_and(|fd| readable(fd).unwrap_or(false))
                    {
                        return Err(interrupted(
                            Interrupt::WorkerExitedDuringHostCall,
                            connection,
                        ));
                    }
                    if self.cancel.is_cancelled() {
                        return Err(interrupted(Interrupt::Cancelled, connection));
                    }
                    // While its call was pending the worker must have sent
                    // nothing (SPEC §9.3): whatever came is fed, and the
                    // answer reports it.
                    match transport.read_available() {
                        Ok(None) => {}
                        Ok(Some(bytes)) => {
                            exchange::feed(connection, &flight, bytes, Instant::now())?
                        }
                        Err(interrupt) => return Err(interrupted(interrupt, connection)),
                    }
                    exchange::answer_host_call(connection, &flight, answer.result, Instant::now())?;
                    transport
                        .write_all(&connection.take_outgoing(), watch)
                        .map_err(|interrupt| interrupted(interrupt, connection))?;
                }
            }
        }
    }

    /// The error of a request made while no process runs (unreachable:
    /// every request path starts one first).
    fn life_ended_error(&self) -> Error {
        let mut error = Error::new(
            ErrorClass::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker is not running",
        );
        if let Some((class, message)) = self.life.ended_by() {
            error = error.with_context(format!(
                "worker {} ended earlier ({class}): {message}",
                self.life.pid()
            ));
        }
        error
    }

    /// Kill, reap, drain (SPEC §13.2); the slot is left without a process;
    /// return `error` with what ending the worker showed.
    fn fail(&mut self, error: Error) -> Error {
        let error = match self.live.take() {
            Some(live) => {
                let pid = live.process.pid();
                classify::with_end(error, pid, end(live))
            }
            None => error,
        };
        self.life.ended(&error);
        error
    }

    /// Retire the worker after its limit tripped (SPEC §13.1, DESIGN
    /// §17.4): the answer is returned as it is, with a cleanup problem
    /// appended only if ending the worker had one.
    fn retire(&mut self, answer: Error) -> Error {
        let mut answer = answer;
        if let Some(live) = self.live.take() {
            for problem in end(live).problems {
                answer = answer.with_context(format!("cleanup: {problem}"));
            }
        }
        self.life.ended(&answer);
        answer
    }
}

impl Supervised for Worker {
    fn life(&self) -> &Life {
        &self.life
    }
    fn has_ended(&self) -> bool {
        self.is_poisoned()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            let _ = end(live);
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.life.pid())
            .field("policy", &self.config.policy())
            .field("live", &self.life.is_live())
            .field("restarts", &self.life.restarts())
            .finish_non_exhaustive()
    }
}

/// Close input, kill the tree, reap, and wait for the pipe to be released
/// (SPEC §13.2 steps 1–4).
fn end(mut live: Live) -> WorkerEnd {
    live.transport.close_input();
    let mut end = live.process.kill_tree_and_reap().into_end();
    let drained = live
        .transport
        .drain_until_closed(Instant::now() + PIPE_RELEASE_WAIT);
    end.problems.extend(classify::drain_problem(
        drained,
        PIPE_RELEASE_WAIT.as_millis(),
    ));
    end
}

/// Wait until `fd` is readable or `until` passes; whether it became
/// readable.
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, until: Instant) -> bool {
    use crate::child_process::poll;
    let mut fds = [poll::interest(fd, poll::PollFlags::IN)];
    matches!(poll::wait_until(&mut fds, until), Ok(true))
}
