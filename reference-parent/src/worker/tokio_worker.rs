//! The async supervisor (feature `tokio`): a [`Worker`] with the guarantees
//! of the blocking [`crate::Worker`], for hosts that run on tokio.
//!
//! - **Spawning** is the blocking worker's own (the private `worker_spawn`
//!   module, run on `spawn_blocking`): its own session and process group
//!   (or a cgroup of its own), a cleared environment plus the declared
//!   entries, no descriptors beyond 0–2, the resource limits of DESIGN §18.1
//!   (SPEC §3.1, DESIGN §17.2). The parent's ends of the pipes become tokio's
//!   `ChildStdin` and `ChildStderr`, driven by the protocol crate's
//!   [`ParentClient`], which decodes every frame under SPEC §4–§9.
//! - **Deadlines** (SPEC §10, DESIGN §17.6): every request, host calls included,
//!   is bounded by an absolute deadline, the policy's `wall_time_ms` from
//!   its sending unless the caller gives one (`startup_timeout` for
//!   `initialize`), kept by the connection on tokio's clock.
//! - **Failure** (SPEC §13.2, DESIGN §17.4): on a deadline, a crash, a
//!   violation or a cancellation, the handle closes the worker's stdin, kills the worker's
//!   whole tree and reaps it (the blocking worker's kill, on
//!   `spawn_blocking`: one group `SIGKILL` while the worker is unreaped,
//!   `cgroup.kill` first in cgroup mode), drains its output until end of
//!   file (at most [`PIPE_RELEASE_WAIT`](super::PIPE_RELEASE_WAIT)),
//!   poisons itself and returns a typed [`Error`]. Later calls fail at once with
//!   [`ErrorClass::Unavailable`]; [`Worker::restart`] starts a fresh worker
//!   from the same configuration.
//! - **Operations**: [`Worker::call`] runs any operation; `eval`,
//!   `check`, `load_config`, `load_plugin`, `render_prompt`, `complete`,
//!   `contribution`, `run`, `plugin_command`, `event` and `test` are the
//!   blocking worker's typed shortcuts, callbacks held to the deadlines
//!   their plugin declared plus the slack (DESIGN §17.6).
//! - **Host calls** (DESIGN §16) are answered by an async function
//!   ([`Worker::call_with_host`]), raced against the request's deadline,
//!   or by the configured process host on `spawn_blocking`
//!   ([`Worker::call`], [`Worker::eval`]). A host function answers only
//!   calls the session accepted (`initialize` enabled process access); it
//!   enforces its own grants.
//! - **Pool**: [`WorkerPool`] runs calls on a few such workers and
//!   restarts a failed member on its next call.
//! - **End**: [`Worker::shutdown`] closes stdin and lets the worker exit
//!   (SPEC §3.3); dropping the handle kills the tree and reaps the worker
//!   synchronously (a `SIGKILL` and a `waitpid`: milliseconds, at most
//!   the kill's own reap bound) so that nothing outlives it (SPEC §17.1).
//!
//! The handle needs a tokio runtime with I/O and time enabled (as
//! `#[tokio::main]` and `#[tokio::test]` build it); either runtime flavor.
//! tokio's own process driver waits only for the children tokio spawned
//! (by pid), so it never reaps a worker behind the handle: the group kill
//! is still sent while the worker is unreaped (SPEC §13.2-b, DESIGN §17.3).
//!
//! While a request is in flight, a task on `spawn_blocking` sleeps in one
//! `ppoll` over the worker's pidfd and the cancellation token (the private
//! `Watcher`), as the blocking worker's wait does (DESIGN §17.3): a worker
//! that exits mid-request (even while a descendant keeps its output open)
//! or a fired [`Cancel`] token of the configuration ends the request at
//! once. Dropping a call's future (a `select!` branch or a
//! `tokio::time::timeout` that won) cancels the request too: the worker is
//! killed and reaped right there, synchronously, and the handle is
//! poisoned. The cost of the watch is one blocking-pool thread per request
//! in flight (tokio reuses them); it ends with its request.
//!
//! Where each part is: the handle and its request loop here; the worker
//! process on tokio (spawn, the watch, kill → reap → drain) in
//! `tokio_worker/process.rs`; what a failed exchange is as an [`Error`] in
//! `tokio_worker/failure.rs`; [`WorkerPool`] in `tokio_worker/pool.rs`.

mod failure;
mod pool;
mod process;

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use ::tokio::process::{ChildStderr, ChildStdin};
use ::tokio::task::spawn_blocking;
use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{
    CommandOutcome, ContributionKind, ErrorCode, EventHandlerReport, ExecutionContext,
    ExecutionOutcome, ExtensionEvent, HostCall, Operation, OperationResult, PluginRegistrations,
    Policy, QuirlConfig, ShellError,
};
use quirl_lua_protocol::tokio_io::ParentClient;
use quirl_lua_protocol::{ErrorKind as ProtocolErrorKind, ProtocolError};
use serde_json::Value;

use super::typed;
use super::{Flight, SHUTDOWN_GRACE, WorkerConfig};
use crate::callback_deadline::{CallbackDeadlines, callback_deadline};
use crate::child_process::worker_kill::{WorkerProcess, describe_status};
use crate::error::{Error, ErrorClass};
use crate::process_host::{Cancel, ProcessHostConfig, run_host_call};
use failure::{abandoned, classify};
pub use pool::WorkerPool;
use process::{Watched, Watcher, exited_by, retire, start};

/// How long, after the worker process exited mid-request, its output may
/// take to deliver what is left and end, before the exit is reported: only
/// a process outside the worker that holds the output makes it wait.
const EXIT_GRACE: Duration = Duration::from_millis(100);

/// What a host function answers to a host call (SPEC §6.7).
pub type HostAnswer = Result<CommandOutcome, ShellError>;

/// A supervised worker process driven from tokio (see the module docs).
pub struct Worker {
    config: WorkerConfig,
    live: Option<Live>,
    poisoned_by: Option<(ErrorClass, String)>,
    cancel: Cancel,
    process_host: ProcessHostConfig,
    pid: u32,
    cgroup_contained: bool,
    /// Deadlines declared by the plugin this worker loaded (DESIGN §17.6).
    callbacks: CallbackDeadlines,
    /// A request is in flight: set before it is sent, cleared when its
    /// call returns. Still set at the next call, it means the caller
    /// dropped the previous call's future (which killed the worker).
    in_flight: Option<Flight>,
}

/// The parts that exist only while the worker runs. Declared in drop
/// order: the pipes close first (stdin: SPEC §13.2 step 1), then the
/// process is killed and reaped.
struct Live {
    client: ParentClient<ChildStderr, ChildStdin>,
    process: WorkerProcess,
    /// The last response was a guest error: the worker may have retired
    /// its VM after it and exited (SPEC §13.1-a, DESIGN §17.4).
    after_guest_error: bool,
}

impl Worker {
    /// Spawn the worker contained and initialize it (DESIGN §17.2); ready on
    /// success. Any failure after the process exists kills and reaps it
    /// before the error is returned.
    pub async fn spawn(config: WorkerConfig) -> Result<Self, Error> {
        let process_host = config.process_host_config()?;
        let cancel = config.cancel.clone().unwrap_or_default();
        let (process, client, cgroup_contained) = start(&config).await?;
        let pid = process.pid();
        let mut worker = Self {
            live: Some(Live {
                client,
                process,
                after_guest_error: false,
            }),
            poisoned_by: None,
            cancel,
            process_host,
            pid,
            cgroup_contained,
            callbacks: CallbackDeadlines::default(),
            in_flight: None,
            config,
        };
        let initialize = Operation::initialize(
            worker.config.policy,
            worker.config.grants.clone(),
            worker.config.process_enabled,
        );
        match worker.exchange(initialize, None, refuse_host_call).await {
            Ok(_) => Ok(worker),
            Err(error) if error.class() == ErrorClass::Guest => {
                let error = error
                    .with_class(ErrorClass::Spawn)
                    .with_context("the worker refused initialize");
                Err(worker.fail(error).await)
            }
            Err(error) => Err(error.with_context("while initializing the worker")),
        }
    }

    /// Run one operation under `deadline` (default: now plus the policy's
    /// wall time, SPEC §10) and return its result, re-validated for that
    /// operation; host calls are answered by the configured process host
    /// (DESIGN §16) on `spawn_blocking`, inside the same deadline.
    pub async fn call(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        // The request's deadline bounds each host command too (DESIGN §17.6).
        let due = deadline.unwrap_or_else(|| Instant::now() + self.wall_time());
        let config = self.process_host.clone();
        let cancel = self.cancel.clone();
        let host = async move |call: &HostCall| {
            run_process_host(config.clone(), call.clone(), due, cancel.clone()).await
        };
        self.exchange(operation, deadline, host).await
    }

    /// [`call`](Self::call), with host calls answered by the async
    /// function `host` (raced against the request's deadline: its future
    /// is dropped when the deadline passes, and the worker is killed).
    pub async fn call_with_host(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
        host: impl AsyncFnMut(&HostCall) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        self.exchange(operation, deadline, host).await
    }

    /// Run one typed request (see `worker/typed.rs`) and take its result
    /// out.
    async fn typed<T>(&mut self, request: typed::Typed<T>) -> Result<T, Error> {
        let result = match request.under {
            typed::Under::Request => self.call(request.operation, None).await?,
            typed::Under::Callback(declared) => {
                self.call_callback(request.operation, declared).await?
            }
        };
        self.take(request.take, result).await
    }

    async fn take<T>(
        &mut self,
        take: fn(OperationResult) -> Result<T, Box<OperationResult>>,
        result: OperationResult,
    ) -> Result<T, Error> {
        match take(result) {
            Ok(value) => Ok(value),
            Err(other) => Err(self.mis_shaped(&other).await),
        }
    }

    /// Evaluate a Lua chunk and return its value.
    pub async fn eval(&mut self, source: &str) -> Result<Value, Error> {
        self.typed(typed::eval(source)).await
    }

    /// [`eval`](Self::eval) with host calls answered by `host` (see
    /// [`call_with_host`](Self::call_with_host)).
    pub async fn eval_with_host(
        &mut self,
        source: &str,
        host: impl AsyncFnMut(&HostCall) -> HostAnswer,
    ) -> Result<Value, Error> {
        let request = typed::eval(source);
        let result = self.call_with_host(request.operation, None, host).await?;
        self.take(request.take, result).await
    }

    /// Check that a source compiles, without running it.
    pub async fn check(&mut self, source: &str, source_name: &str) -> Result<(), Error> {
        self.typed(typed::check(source, source_name)).await
    }

    /// Evaluate a configuration file's source.
    pub async fn load_config(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<QuirlConfig, Error> {
        self.typed(typed::load_config(source, source_name)).await
    }

    /// Load a plugin and return what it registered; its callbacks are then
    /// held to their declared deadlines (DESIGN §17.6).
    pub async fn load_plugin(
        &mut self,
        source: &str,
        source_name: &str,
    ) -> Result<PluginRegistrations, Error> {
        let registrations = self.typed(typed::load_plugin(source, source_name)).await?;
        self.callbacks = CallbackDeadlines::new(&registrations);
        Ok(registrations)
    }

    /// Render a registered prompt segment (`None`: it chose not to render).
    pub async fn render_prompt(
        &mut self,
        name: &str,
        context: Value,
    ) -> Result<Option<String>, Error> {
        let request = typed::render_prompt(&self.callbacks, name, context);
        self.typed(request).await
    }

    /// Ask a registered completion provider.
    pub async fn complete(&mut self, command: &str, context: Value) -> Result<Value, Error> {
        self.typed(typed::complete(command, context)).await
    }

    /// Invoke a registered contribution.
    pub async fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        let request = typed::contribution(&self.callbacks, kind, name, context);
        self.typed(request).await
    }

    /// Run a runner module with an execution context.
    pub async fn run(
        &mut self,
        source: &str,
        source_name: &str,
        context: ExecutionContext,
    ) -> Result<ExecutionOutcome, Error> {
        self.typed(typed::run(source, source_name, context)).await
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
        self.typed(typed::plugin_command(name, context, timeout))
            .await
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub async fn event(&mut self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        let request = typed::event(&self.callbacks, event);
        self.typed(request).await
    }

    /// Run a test file and return how many tests ran.
    pub async fn test(&mut self, source: &str, source_name: &str) -> Result<u64, Error> {
        self.typed(typed::test(source, source_name)).await
    }

    /// Replace this worker with a fresh one spawned from the same
    /// configuration (e.g. after a deadline poisoned it). The old worker,
    /// if still running, is killed, reaped and drained first.
    pub async fn restart(&mut self) -> Result<(), Error> {
        if let Some(live) = self.live.take() {
            let _ = retire(live).await;
        }
        self.in_flight = None;
        self.poisoned_by = Some((
            ErrorClass::Unavailable,
            "the worker was replaced by a restart".to_owned(),
        ));
        *self = Self::spawn(self.config.clone()).await?;
        Ok(())
    }

    /// End the worker cleanly (SPEC §3.3): close its input, give it
    /// [`SHUTDOWN_GRACE`] to end its stream on its own, then kill whatever
    /// is left of its tree and reap it. An error unless the worker exited
    /// with status 0 by itself.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if self.in_flight.is_some() {
            let error = abandoned(self.in_flight);
            return Err(self.fail(error).await);
        }
        let Some(mut live) = self.live.take() else {
            return Err(self.unavailable());
        };
        self.poisoned_by = Some((
            ErrorClass::Unavailable,
            "the worker was shut down".to_owned(),
        ));
        let grace = Instant::now() + SHUTDOWN_GRACE;
        let closed = live.client.close_writer().await;
        let ended = match closed {
            Ok(()) => ::tokio::time::timeout_at(grace.into(), live.client.next_event()).await,
            Err(error) => Ok(Err(error)),
        };
        // The end of its stream may come before the end of the process:
        // let it exit by itself before the kill (as the blocking worker's
        // shutdown does).
        if matches!(ended, Ok(Ok(None))) {
            exited_by(&live.process, grace).await;
        }
        let (status, mut problems) = retire(live).await;
        match ended {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(event))) => problems.push(format!(
                "the worker sent a frame after its input was closed: {event:?}"
            )),
            Ok(Err(error)) => problems.push(format!("ending the session: {error}")),
            Err(_) => problems.push(format!(
                "the worker's stream was still open {} ms after its input was closed",
                SHUTDOWN_GRACE.as_millis()
            )),
        }
        if problems.is_empty() && status.is_some_and(|status| status.success()) {
            return Ok(());
        }
        Err(super::unclean_exit(self.pid, status, problems))
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

    /// Whether an earlier failure (or an abandoned call) ended this
    /// worker: a call would fail without a [`restart`](Self::restart).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned_by.is_some() || self.in_flight.is_some() || self.live.is_none()
    }

    /// The policy the worker was initialized with.
    pub fn policy(&self) -> Policy {
        self.config.policy
    }

    fn wall_time(&self) -> Duration {
        Duration::from_millis(self.config.policy.wall_time_ms())
    }

    /// Unreachable in practice (see `typed::mis_shaped`): a typed error and
    /// the worker's kill rather than a panic.
    async fn mis_shaped(&mut self, result: &OperationResult) -> Error {
        self.fail(super::typed::mis_shaped(result)).await
    }

    /// Run a callback under its declared deadline plus the slack (capped
    /// by the policy's wall time; DESIGN §17.6). `None`: no declaration
    /// known, the request's own deadline applies.
    async fn call_callback(
        &mut self,
        operation: Operation,
        declared: Option<Duration>,
    ) -> Result<OperationResult, Error> {
        let started = Instant::now();
        let request = started + self.wall_time();
        let deadline = declared.map_or(request, |d| callback_deadline(started, d, request));
        self.call(operation, Some(deadline)).await
    }

    fn unavailable(&self) -> Error {
        let mut error = Error::new(
            ErrorClass::Unavailable,
            ErrorCode::Lua,
            "the Lua worker is unavailable",
        )
        .with_help("start a new worker (restart); a failed worker is never reused");
        if let Some((kind, message)) = &self.poisoned_by {
            error = error.with_context(format!(
                "worker {} ended earlier ({kind}): {message}",
                self.pid
            ));
        }
        error
    }

    /// Send one request and wait for its response, answering host calls
    /// with `host`, under the request's deadline.
    async fn exchange(
        &mut self,
        operation: Operation,
        deadline: Option<Instant>,
        host: impl AsyncFnMut(&HostCall) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        if self.in_flight.is_some() {
            let error = abandoned(self.in_flight);
            return Err(self.fail(error).await);
        }
        if self.cancel.is_cancelled() && self.live.is_some() {
            let error = Error::new(
                ErrorClass::Cancelled,
                ErrorCode::ResourceLimit,
                "the Lua request was cancelled",
            )
            .with_context("the worker's cancellation token fired before the request was sent")
            .with_help("the worker was killed; start a new one");
            return Err(self.fail(error).await);
        }
        let budget = match &operation {
            Operation::Initialize { .. } => self.config.startup_timeout,
            _ => self.wall_time(),
        };
        // Out of the handle while the request runs: if the caller drops
        // this future, `live` is dropped with it, which closes the pipes
        // and kills and reaps the worker there and then (SPEC §13.2).
        let Some(mut live) = self.live.take() else {
            return Err(self.unavailable());
        };
        let started = Instant::now();
        let own = started + budget;
        let flight = Flight {
            id: live.client.connection().next_request_id(),
            operation: operation.kind().as_str(),
            started,
            deadline: deadline.unwrap_or(own),
        };
        self.in_flight = Some(flight);
        // The pinned call borrows the client until this block ends.
        let outcome = {
            let mut watcher = Watcher::start(&live.process, &self.cancel, flight.deadline);
            // The connection keeps the deadline (SPEC §10) and gives the
            // request up when it passes, host calls included.
            let call = live
                .client
                .call_with_host_before(operation, flight.deadline, host);
            let mut call = std::pin::pin!(call);
            let event = match watcher.as_mut() {
                Some(watcher) => {
                    let mut watched = std::pin::pin!(watcher.wait());
                    std::future::poll_fn(|context| {
                        if let Poll::Ready(outcome) = call.as_mut().poll(context) {
                            return Poll::Ready(Ok(outcome));
                        }
                        watched.as_mut().poll(context).map(Err)
                    })
                    .await
                }
                None => Ok(call.as_mut().await),
            };
            match event {
                Ok(outcome) => outcome,
                Err(Watched::Cancelled) => Err(ProtocolError::new(
                    ProtocolErrorKind::Cancelled,
                    "the worker's cancellation token fired",
                )),
                // Output already in the pipe comes first (a last frame written
                // just before exiting, DESIGN §17.3): with no other holder, the
                // stream ends at once; a holder outside the worker gets
                // EXIT_GRACE.
                Err(Watched::Exited) => {
                    match ::tokio::time::timeout(EXIT_GRACE, call.as_mut()).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(ProtocolError::new(
                            ProtocolErrorKind::UnexpectedEnd,
                            "the worker process exited while another process kept its output open",
                        )),
                    }
                }
            }
        };
        self.in_flight = None;
        // An answer first seen at or after the deadline is late: the
        // parent's clock wins over the worker's own wall-time answer
        // (DESIGN §17.3), as in the blocking worker.
        let outcome = match outcome {
            Ok(_) if Instant::now() >= flight.deadline => Err(ProtocolError::new(
                ProtocolErrorKind::DeadlinePassed,
                "the answer arrived after the request's deadline",
            )),
            outcome => outcome,
        };
        // A failure keeps the flag of the last answer: a worker gone after
        // a guest error may have retired (DESIGN §17.4).
        if let Ok(answer) = &outcome {
            live.after_guest_error = answer.is_err();
        }
        let stream_ended = live.client.connection().is_ended();
        let untouched = {
            let connection = live.client.connection();
            !connection.must_kill() && !stream_ended && connection.in_flight().is_none()
        };
        self.live = Some(live);
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(record)) => Err(Error::guest(record)),
            Err(error) if error.kind() == ProtocolErrorKind::InvalidUse && untouched => {
                Err(Error::new(
                    ErrorClass::InvalidInput,
                    ErrorCode::Validation,
                    "the request was rejected before it was sent",
                )
                .with_context(error.to_string()))
            }
            Err(error) => {
                let failure = classify(&error, stream_ended, flight);
                Err(self.fail(failure).await)
            }
        }
    }

    /// Close stdin, kill the tree, reap, drain, poison (SPEC §13.2 steps
    /// 1–5); return `error` with what happened and any cleanup problem as
    /// context (step 6).
    async fn fail(&mut self, error: Error) -> Error {
        let mut error = error;
        self.in_flight = None;
        if let Some(live) = self.live.take() {
            let after_guest_error = live.after_guest_error;
            let (status, problems) = retire(live).await;
            // A worker that answered with an error and then exited 0
            // retired its VM on purpose (DESIGN §17.4): not a crash.
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
            error = match status {
                Some(status) => {
                    error.with_context(format!("worker {} {}", self.pid, describe_status(status)))
                }
                None => error.with_context(format!("worker {} was not reaped here", self.pid)),
            };
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
    /// Kill the tree and reap the worker, here and now (SPEC §17.1): the
    /// pipes close, one group `SIGKILL`, one `waitpid`.
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            let Live {
                client,
                mut process,
                ..
            } = live;
            drop(client);
            let _ = process.kill_tree_and_reap();
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.pid)
            .field("policy", &self.config.policy)
            .field("poisoned_by", &self.poisoned_by)
            .finish_non_exhaustive()
    }
}

/// Run one host call with the configured process host (DESIGN §16.6) on
/// `spawn_blocking`, bounded by the request's deadline `due`; if the
/// request's future is dropped, the task still ends by `due`.
// The error record is the wire's own type (SPEC §6.9), as in the protocol
// crate's host callbacks; boxing it here would only differ from them.
#[allow(clippy::result_large_err)]
async fn run_process_host(
    config: ProcessHostConfig,
    call: HostCall,
    due: Instant,
    cancel: Cancel,
) -> HostAnswer {
    let task = spawn_blocking(move || run_host_call(&config, &call, due, &cancel).result);
    match task.await {
        Ok(answer) => answer,
        Err(error) => Err(ShellError::new(
            ErrorCode::ProcessSpawn,
            format!("the host command's task failed: {error}"),
        )),
    }
}

/// The host function of `initialize`, which runs no guest code.
async fn refuse_host_call(_: &HostCall) -> HostAnswer {
    Err(ShellError::new(
        ErrorCode::InvalidCommand,
        "no host call is answered during initialize",
    ))
}
