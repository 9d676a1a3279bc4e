//! The async [`Worker`]: the blocking [`crate::Worker`]'s supervision on
//! tokio — the same core decisions (`crate::supervision`), the I/O awaited.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use ::tokio::io::unix::AsyncFd;
use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{
    CheckReport, ContributionKind, ErrorCode, EventHandlerReport, ExecutionContext,
    ExecutionOutcome, ExtensionEvent, HostCall, Operation, OperationResult, PluginRegistrations,
    QuirlConfig, ShellError,
};
use serde_json::Value;

use super::host::ContainedHost;
use super::process::{self, Live};
use super::transport::{AsyncWatch, register};
use crate::callback_deadline::callback_deadline;
use crate::cancel::Cancel;
use crate::error::{Error, ErrorClass};
use crate::process_host::ProcessHostConfig;
use crate::supervision::classify::{self, InitializeFailed, Interrupt};
use crate::supervision::exchange::{self, HostAnswer, Resend, Step};
use crate::supervision::flight::Flight;
use crate::supervision::life::{AfterAnswer, Life, Program};
use crate::supervision::pool::Supervised;
use crate::supervision::typed::{self, Typed, Under};
use crate::worker::{SHUTDOWN_GRACE, WorkerConfig};
use ::tokio::io::Interest;

/// A supervised worker slot driven from tokio (see the module docs): one
/// worker process at a time, replaced by a fresh one on the next call
/// after it ended.
pub struct Worker {
    config: WorkerConfig,
    process_host: ProcessHostConfig,
    cancel: Cancel,
    /// The handle's registration with `cancel`: readable once it fires.
    cancel_wake: AsyncFd<OwnedFd>,
    live: Option<Live>,
    life: Life,
    cgroup_contained: bool,
}

impl Worker {
    crate::supervision::life::slot_accessors!();

    /// Spawn the worker contained and initialize it (DESIGN §17.2); ready on
    /// success. Any failure after the process exists kills and reaps it
    /// before the error is returned.
    pub async fn spawn(config: WorkerConfig) -> Result<Self, Error> {
        let process_host = config.process_host_config()?;
        let cancel = config.cancel().cloned().unwrap_or_default();
        let cancel_wake = cancel
            .register()
            .and_then(|waiter| register(waiter.into_fd(), Interest::READABLE))
            .map_err(classify::no_cancel_wake)?;
        let mut worker = Self {
            config,
            process_host,
            cancel,
            cancel_wake,
            live: None,
            life: Life::default(),
            cgroup_contained: false,
        };
        worker.start().await?;
        Ok(worker)
    }

    /// Run one operation under `deadline` (default: now plus the policy's
    /// wall time, SPEC §10) and return its result, re-validated for that
    /// operation; host calls are answered by the configured process host
    /// ([`ContainedHost`]), inside the same deadline.
    pub async fn call(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        self.call_with_host(operation, deadline, answer_contained)
            .await
    }

    /// [`call`](Self::call), with host calls answered by the async
    /// function `host`. It is handed the call and the configured process
    /// host, to run the calls it does not answer itself
    /// (`contained.run(call).await`). It is raced against the request's
    /// deadline, the cancellation token and the worker's exit: its future
    /// is dropped when one of them wins, and the worker is killed (a worker
    /// that dies meanwhile is reported as a crash at once).
    pub async fn call_with_host(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
        mut host: impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        self.make_ready().await?;
        let started = Instant::now();
        let deadline = deadline.unwrap_or_else(|| started + self.wall_time());
        self.exchange(operation, started, deadline, &mut host).await
    }

    /// Run one typed request (see `supervision::typed`) and take its
    /// result out.
    async fn typed<T>(
        &mut self,
        request: impl FnOnce(&Life) -> Typed<T>,
        mut host: impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<T, Error> {
        self.make_ready().await?;
        let request = request(&self.life);
        let started = Instant::now();
        let own = started + self.wall_time();
        let deadline = match request.under {
            Under::Request | Under::Callback(None) => own,
            Under::Callback(Some(declared)) => callback_deadline(started, declared, own),
        };
        let result = self
            .exchange(request.operation, started, deadline, &mut host)
            .await?;
        match (request.take)(result) {
            Ok(value) => Ok(value),
            Err(other) => Err(self.fail(typed::mis_shaped(&other)).await),
        }
    }

    /// Evaluate a Lua chunk and return its value.
    pub async fn eval(&mut self, source: &str) -> Result<Value, Error> {
        self.typed(|_| typed::eval(source), answer_contained).await
    }

    /// [`eval`](Self::eval) with host calls answered by `host` (see
    /// [`call_with_host`](Self::call_with_host)).
    pub async fn eval_with_host(
        &mut self,
        source: &str,
        host: impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<Value, Error> {
        self.typed(|_| typed::eval(source), host).await
    }

    /// Check a source without running it: a compile error is a guest
    /// error; what the worker's lint found is the report, when the
    /// worker was granted `check.diagnostics` (SPEC §7.2; otherwise
    /// the report is empty).
    pub async fn check(&mut self, source: &str, source_name: &str) -> Result<CheckReport, Error> {
        self.typed(|_| typed::check(source, source_name), answer_contained)
            .await
    }

    /// Evaluate a configuration file's source.
    pub async fn load_config(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<QuirlConfig, Error> {
        self.typed(
            |_| typed::load_config(source, source_name),
            answer_contained,
        )
        .await
    }

    /// Load a plugin and return what it registered; its callbacks are then
    /// held to their declared deadlines (DESIGN §17.6), and a fresh worker
    /// (after a restart) loads it again before its first request.
    pub async fn load_plugin(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<PluginRegistrations, Error> {
        let registrations = self
            .typed(
                |_| typed::load_plugin(source, source_name),
                answer_contained,
            )
            .await?;
        self.life.loaded_plugin(source, source_name, &registrations);
        Ok(registrations)
    }

    /// Render a registered prompt segment (`None`: it chose not to render).
    pub async fn render_prompt(
        &mut self,
        name: &str,
        context: Value,
    ) -> Result<Option<String>, Error> {
        self.typed(
            |life| typed::render_prompt(life.callbacks(), name, context),
            answer_contained,
        )
        .await
    }

    /// Ask a registered completion provider.
    pub async fn complete(&mut self, command: &str, context: Value) -> Result<Value, Error> {
        self.typed(|_| typed::complete(command, context), answer_contained)
            .await
    }

    /// Invoke a registered contribution.
    pub async fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        self.typed(
            |life| typed::contribution(life.callbacks(), kind, name, context),
            answer_contained,
        )
        .await
    }

    /// Run a runner module with an execution context.
    pub async fn run(
        &mut self,
        source: &str,
        source_name: &str,
        context: ExecutionContext,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(
            |_| typed::run(source, source_name, context),
            answer_contained,
        )
        .await
    }

    /// Run a registered plugin command. `timeout` is its own deadline
    /// (`deadline_ms`, sent to the worker); the parent kills the worker at
    /// that deadline plus the callback slack (DESIGN §17.6).
    pub async fn plugin_command(
        &mut self,
        name: &str,
        context: ExecutionContext,
        timeout: Duration,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(
            |_| typed::plugin_command(name, context, timeout),
            answer_contained,
        )
        .await
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub async fn event(&mut self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        self.typed(
            |life| typed::event(life.callbacks(), event),
            answer_contained,
        )
        .await
    }

    /// Run a test file and return how many tests ran.
    pub async fn test(&mut self, source: &str, source_name: &str) -> Result<u64, Error> {
        self.typed(|_| typed::test(source, source_name), answer_contained)
            .await
    }

    /// End the current worker (if it runs) and start a fresh one from the
    /// same configuration, loading the plugin the handle serves.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.settle_abandoned();
        if let Some(live) = self.live.take() {
            let error = classify::replaced_by_restart();
            let _ = process::end(live).await;
            self.life.ended(&error);
        }
        self.start().await
    }

    /// End the worker cleanly (SPEC §3.3): close its input, give it
    /// [`SHUTDOWN_GRACE`] to exit on its own, then kill whatever is left of
    /// its tree and reap it. An error unless the worker exited with status
    /// 0 by itself; a handle whose worker had ended has nothing to end.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let Some(mut live) = self.live.take() else {
            return Ok(());
        };
        let pid = live.pid();
        live.transport.close_input();
        let exited = match &live.exit {
            Some(fd) => ::tokio::time::timeout(SHUTDOWN_GRACE, fd.readable())
                .await
                .is_ok_and(|ready| ready.is_ok()),
            None => true,
        };
        let end = process::end(live).await;
        if exited && end.exited_zero && end.problems.is_empty() {
            return Ok(());
        }
        Err(classify::unclean_exit(pid, end))
    }

    /// Whether the current worker process has ended (a failure, a
    /// retirement after a tripped limit, or a call dropped mid-request):
    /// the next call starts a fresh one.
    pub fn is_poisoned(&self) -> bool {
        !self.life.is_live() || self.live.is_none()
    }

    fn wall_time(&self) -> Duration {
        Duration::from_millis(self.config.policy().wall_time_ms())
    }

    /// A call dropped mid-request killed its worker (its `Live` was
    /// dropped with the future): record it.
    fn settle_abandoned(&mut self) {
        if let Some(flight) = self.life.take_abandoned()
            && self.live.is_none()
        {
            self.life.ended(&classify::abandoned(&flight));
        }
    }

    /// Start a fresh worker: spawn, `initialize`, load the slot's plugin.
    /// Any failure kills and reaps what was started.
    async fn start(&mut self) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(classify::cancelled_before_start());
        }
        let (live, contained) = process::start(&self.config).await?;
        let pid = live.pid();
        self.cgroup_contained = contained;
        self.live = Some(live);
        let initialize = Operation::initialize(
            self.config.policy(),
            self.config.grants().map(<[String]>::to_vec),
            self.config.process_enabled(),
        );
        let started = Instant::now();
        let deadline = started + self.config.startup_timeout();
        match self
            .exchange(initialize, started, deadline, &mut refuse_host_call)
            .await
        {
            Ok(_) => {}
            Err(error) => {
                return Err(match classify::initialize_failed(error) {
                    InitializeFailed::Refused(error) => self.fail(error).await,
                    InitializeFailed::Ended(error) => {
                        self.live = None;
                        error
                    }
                });
            }
        }
        if let Program::Plugin {
            source,
            source_name,
        } = self.life.program().clone()
        {
            let load = typed::load_plugin(&source, &source_name);
            let started = Instant::now();
            let deadline = started + self.wall_time();
            if let Err(error) = self
                .exchange(load.operation, started, deadline, &mut answer_contained)
                .await
            {
                let error = classify::replay_failed(error, &source_name);
                return Err(self.fail(error).await);
            }
        }
        self.life.started(pid);
        Ok(())
    }

    /// Before a request: start a worker if the slot has none, or replace
    /// the live one if it was found ended (never send into it).
    async fn make_ready(&mut self) -> Result<(), Error> {
        self.settle_abandoned();
        if self.life.needs_start() || self.live.is_none() {
            return self.start().await;
        }
        let Some(live) = self.live.as_mut() else {
            return self.start().await;
        };
        let exited = live.has_exited();
        let read = live.transport.read_available();
        if !classify::ended_between_calls(exited, read, &mut live.connection) {
            return Ok(());
        }
        let Some(live) = self.live.take() else {
            return self.start().await;
        };
        let may_have_retired = live.connection.may_have_retired();
        let pid = live.pid();
        let end = process::end(live).await;
        self.life
            .found_ended_between_calls(may_have_retired, pid, end);
        self.start().await
    }

    /// Send one request to the live worker and wait for its answer,
    /// answering host calls with `host`; retire the worker after a tripped
    /// limit, end it after a failure. While the request runs, the worker's
    /// parts are out of the handle: if the caller drops this future, they
    /// are dropped with it, which kills and reaps the worker there and then
    /// (SPEC §13.2), and the next call notices.
    async fn exchange(
        &mut self,
        operation: Operation,
        started: Instant,
        deadline: Instant,
        host: &mut impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        let Some(mut live) = self.live.take() else {
            return Err(Error::new(
                ErrorClass::WorkerCrashed,
                ErrorCode::Lua,
                "the Lua worker is not running",
            ));
        };
        let resend = Resend::keep(&live.connection, &operation);
        let flight = match exchange::send(&mut live.connection, operation, started, deadline) {
            Ok(flight) => flight,
            Err(error) if error.worker_ended() => return Err(self.end_with(live, error).await),
            Err(error) => {
                self.live = Some(live);
                return Err(error);
            }
        };
        self.life.begin(flight);
        let outcome = drive(
            &mut live,
            &self.cancel,
            &self.cancel_wake,
            &self.process_host,
            flight,
            host,
        )
        .await;
        self.life.finish();
        match outcome {
            Ok(Ok(result)) => {
                self.live = Some(live);
                Ok(result)
            }
            Ok(Err(answer)) => match Life::after_answer(&Err(answer.clone())) {
                AfterAnswer::Keep => {
                    self.live = Some(live);
                    Err(answer)
                }
                AfterAnswer::Retire => {
                    let mut answer = answer;
                    for problem in process::end(live).await.problems {
                        answer = answer.with_context(format!("cleanup: {problem}"));
                    }
                    self.life.ended(&answer);
                    Err(answer)
                }
            },
            Err(failure) => match resend.unread(&live.connection) {
                Some(operation) => {
                    let pid = live.pid();
                    let end = process::end(live).await;
                    self.life.found_ended_before_request(true, pid, end);
                    Box::pin(self.start()).await?;
                    Box::pin(self.exchange(operation, started, deadline, host)).await
                }
                _ => Err(self.end_with(live, failure).await),
            },
        }
    }

    /// Kill, reap, drain (SPEC §13.2) the live worker, if any; return
    /// `error` with what ending it showed.
    async fn fail(&mut self, error: Error) -> Error {
        match self.live.take() {
            Some(live) => self.end_with(live, error).await,
            None => {
                self.life.ended(&error);
                error
            }
        }
    }

    async fn end_with(&mut self, live: Live, error: Error) -> Error {
        let pid = live.pid();
        let error = classify::with_end(error, pid, process::end(live).await);
        self.life.ended(&error);
        error
    }
}

/// The request loop (DESIGN §17.3): `Ok(Ok)` a result, `Ok(Err)` the
/// worker's error answer, `Err` a failure that ends the worker.
async fn drive(
    live: &mut Live,
    cancel: &Cancel,
    cancel_wake: &AsyncFd<OwnedFd>,
    process_host: &ProcessHostConfig,
    flight: Flight,
    host: &mut impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
) -> Result<Result<OperationResult, Error>, Error> {
    let Live {
        transport,
        connection,
        exit,
        ..
    } = live;
    let watch = AsyncWatch {
        deadline: flight.deadline,
        cancel,
        cancel_wake,
        exit: exit.as_ref(),
    };
    let interrupted = |interrupt, connection: &mut quirl_lua_protocol::ParentConnection| {
        classify::interrupted(interrupt, connection, &flight, Instant::now())
    };
    let outgoing = connection.take_outgoing();
    if let Err(interrupt) = transport.write_all(&outgoing, watch).await {
        return Err(interrupted(interrupt, connection));
    }
    loop {
        match exchange::step(connection, &flight, Instant::now())? {
            Step::Result(result) => return Ok(Ok(result)),
            Step::Answered(error) => return Ok(Err(error)),
            Step::Read => match transport.read_chunk(watch).await {
                Ok(chunk) => exchange::feed(connection, &flight, chunk, Instant::now())?,
                Err(interrupt) => return Err(interrupted(interrupt, connection)),
            },
            Step::HostCall(call) => {
                let worker_exit = exit
                    .as_ref()
                    .and_then(|fd| fd.get_ref().as_fd().try_clone_to_owned().ok());
                let contained = ContainedHost::for_worker(
                    process_host.clone(),
                    flight.deadline,
                    cancel.clone(),
                    worker_exit,
                );
                // The host function races the deadline, the token and the
                // worker's exit; the loser's future is dropped.
                let answer = ::tokio::select! {
                    biased;
                    interrupt = watch.interrupted() => {
                        let interrupt = match interrupt {
                            Interrupt::WorkerExited => Interrupt::WorkerExitedDuringHostCall,
                            other => other,
                        };
                        return Err(interrupted(interrupt, connection));
                    }
                    answer = host(&call, &contained) => answer,
                };
                // What ended the call besides itself, as observed.
                if exit.as_ref().is_some_and(|fd| {
                    crate::cancel::readable(fd.get_ref().as_fd()).unwrap_or(false)
                }) {
                    return Err(interrupted(
                        Interrupt::WorkerExitedDuringHostCall,
                        connection,
                    ));
                }
                if cancel.is_cancelled() {
                    return Err(interrupted(Interrupt::Cancelled, connection));
                }
                // While its call was pending the worker must have sent
                // nothing (SPEC §9.3).
                match transport.read_available() {
                    Ok(None) => {}
                    Ok(Some(bytes)) => exchange::feed(connection, &flight, bytes, Instant::now())?,
                    Err(interrupt) => return Err(interrupted(interrupt, connection)),
                }
                exchange::answer_host_call(connection, &flight, answer, Instant::now())?;
                let outgoing = connection.take_outgoing();
                if let Err(interrupt) = transport.write_all(&outgoing, watch).await {
                    return Err(interrupted(interrupt, connection));
                }
            }
        }
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

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.life.pid())
            .field("policy", &self.config.policy())
            .field("live", &self.live.is_some())
            .field("restarts", &self.life.restarts())
            .finish_non_exhaustive()
    }
}

/// Host calls go to the configured process host.
// The error record is the wire's own type (SPEC §6.9).
#[allow(clippy::result_large_err)]
async fn answer_contained(call: &HostCall, contained: &ContainedHost) -> HostAnswer {
    contained.run(call).await
}

/// The host function of `initialize`, which runs no guest code.
#[allow(clippy::result_large_err)]
async fn refuse_host_call(_: &HostCall, _: &ContainedHost) -> HostAnswer {
    Err(ShellError::new(
        ErrorCode::InvalidCommand,
        "no host call is answered during initialize",
    ))
}
