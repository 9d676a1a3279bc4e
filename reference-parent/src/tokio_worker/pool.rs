//! The async pool driver: [`WorkerPool`], the supervision core's pool
//! ([`PoolCore`]) behind a mutex that is never held across an `.await`,
//! `Notify` for waiting callers and the keeper, and the keeper task. The
//! policy — dispatch, the bounded queue, the restart budget, quarantine,
//! warm spares, generations, the counters — is exactly the blocking
//! [`lifecycle::WorkerPool`](crate::lifecycle::WorkerPool)'s
//! (DESIGN §17.7).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ::tokio::sync::Notify;
use ::tokio::task::JoinHandle;
use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{HostCall, Operation, OperationResult};
use serde_json::Value;

use super::host::ContainedHost;
use super::worker::Worker;
use crate::cancel::Cancel;
use crate::error::Error;
use crate::lifecycle::ShutdownReport;
use crate::supervision::exchange::HostAnswer;
use crate::supervision::pool::{
    Chore, Dispatch, Generation, Lease, PoolCore, PoolOptions, Program,
};
use crate::supervision::stats::PoolStats;
use crate::worker::{PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, WorkerConfig};

/// A pool of async workers started from one configuration: the blocking
/// [`lifecycle::WorkerPool`](crate::lifecycle::WorkerPool)'s policy on
/// tokio, with the same [`PoolOptions`], stats, restart budget,
/// quarantine and warm spares.
///
/// ```no_run
/// # async fn example() -> Result<(), quirl_lua_reference_parent::Error> {
/// use quirl_lua_reference_parent::lifecycle::PoolOptions;
/// use quirl_lua_reference_parent::tokio_worker::WorkerPool;
/// use quirl_lua_reference_parent::{Policy, WorkerCommand, WorkerConfig};
///
/// let command = WorkerCommand::new("/usr/local/bin/quirl-worker");
/// let config = WorkerConfig::new(command, Policy::quirl_script_profile());
/// let pool = WorkerPool::start("snippets", config, PoolOptions::new().with_size(2)).await?;
/// assert_eq!(pool.eval("return 6 * 7").await?, serde_json::json!(42));
/// // A runaway script trips its limit; the next call runs on a fresh worker.
/// let _ = pool.eval("while true do end").await;
/// assert_eq!(pool.eval("return 1").await?, serde_json::json!(1));
/// println!("{}", serde_json::to_string(&pool.stats()).unwrap_or_default());
/// pool.shutdown(std::time::Duration::from_secs(3)).await;
/// # Ok(())
/// # }
/// ```
pub struct WorkerPool {
    name: String,
    shared: Arc<Shared>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    config: WorkerConfig,
    token: Cancel,
    core: Mutex<PoolCore<Worker>>,
    /// Wakes queued callers and a shutdown waiting for busy members.
    changed: Notify,
    /// Wakes the keeper.
    keeper_wake: Notify,
}

impl WorkerPool {
    /// Start `options.size()` workers with `config`, named `name` in stats
    /// and errors, and the keeper task if the pool keeps spares. Fails
    /// (killing whatever started) if any worker cannot be started and
    /// initialized. Cancellation works as for the blocking pool: the token
    /// of `config` ([`WorkerConfig::with_cancel`]), or a fresh one, is the
    /// pool's; [`shutdown`](Self::shutdown) cancels it.
    pub async fn start(
        name: impl Into<String>,
        config: WorkerConfig,
        options: PoolOptions,
    ) -> Result<Self, Error> {
        let name = name.into();
        Self::start_with(name.clone(), config, options, None)
            .await
            .map_err(|error| error.with_context(format!("while starting pool `{name}`")))
    }

    /// Start a pool whose every worker loads the plugin `source` (named
    /// `source_name`) first; callbacks then run with
    /// [`with_worker`](Self::with_worker) (`worker.render_prompt(…)`, …).
    pub async fn start_plugin(
        name: impl Into<String>,
        config: WorkerConfig,
        options: PoolOptions,
        source: &str,
        source_name: &str,
    ) -> Result<Self, Error> {
        let name = name.into();
        let plugin = Some((source.to_owned(), source_name.to_owned()));
        Self::start_with(name.clone(), config, options, plugin)
            .await
            .map_err(|error| error.with_context(format!("while starting plugin pool `{name}`")))
    }

    async fn start_with(
        name: String,
        config: WorkerConfig,
        options: PoolOptions,
        plugin: Option<(String, String)>,
    ) -> Result<Self, Error> {
        options.validate()?;
        let token = config.cancel().cloned().unwrap_or_default();
        let config = config.with_cancel(token.clone());
        let (generation, workers) = start_generation(&config, plugin, options.size()).await?;
        let shared = Arc::new(Shared {
            config,
            token,
            core: Mutex::new(PoolCore::new(name.clone(), options, generation, workers)),
            changed: Notify::new(),
            keeper_wake: Notify::new(),
        });
        let keeper = (options.spares() > 0).then(|| {
            let shared = Arc::clone(&shared);
            ::tokio::spawn(async move { shared.keep().await })
        });
        Ok(Self {
            name,
            shared,
            keeper: Mutex::new(keeper),
        })
    }

    /// Run `f` on a member's worker (several requests in a row on one
    /// worker, a plugin's callbacks, …). A worker that `f` leaves ended (a
    /// failure, or a tripped limit) is replaced before its member's next
    /// call; a worker failure counts against the restart budget. If this
    /// future is dropped while `f` runs, the worker's request is abandoned
    /// (its worker killed and reaped) and the member is put back, counted
    /// as a cancellation.
    pub async fn with_worker<T>(
        &self,
        f: impl AsyncFnOnce(&mut Worker) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let shared = &self.shared;
        let mut held = self.checkout().await?;
        let Some(lease) = held.lease.as_mut() else {
            return Err(shared.lock().shut_down_error());
        };
        let mut worker = match lease.worker.take() {
            Some(worker) => worker,
            None => {
                let generation = Arc::clone(&lease.generation);
                match start_worker(&shared.config, &generation).await {
                    Ok(worker) => {
                        if let Some(lease) = held.lease.as_mut() {
                            shared.lock().started(lease, &worker);
                        }
                        shared.keeper_wake.notify_one();
                        worker
                    }
                    Err(error) => {
                        let index = held.lease.as_ref().map_or(0, |lease| lease.index);
                        let error = error
                            .with_context(format!("could not start a worker for member {index}"));
                        drop(held.start_failed(&error));
                        return Err(error);
                    }
                }
            }
        };
        let result = f(&mut worker).await;
        let retire = held.checkin(worker, result.as_ref().map(|_| ()));
        drop(retire);
        result
    }

    /// [`Worker::eval`] on a member.
    pub async fn eval(&self, source: &str) -> Result<Value, Error> {
        self.with_worker(async |worker| worker.eval(source).await)
            .await
    }

    /// [`Worker::eval_with_host`] on a member.
    pub async fn eval_with_host(
        &self,
        source: &str,
        host: impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<Value, Error> {
        self.with_worker(async |worker| worker.eval_with_host(source, host).await)
            .await
    }

    /// [`Worker::call`] on a member.
    pub async fn call(
        &self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        self.with_worker(async |worker| worker.call(operation, deadline).await)
            .await
    }

    /// [`Worker::call_with_host`] on a member.
    pub async fn call_with_host(
        &self,
        operation: Operation,
        deadline: Option<Instant>,
        host: impl AsyncFnMut(&HostCall, &ContainedHost) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        self.with_worker(async |worker| worker.call_with_host(operation, deadline, host).await)
            .await
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.shared.lock().options().size()
    }

    /// A snapshot of the pool's statistics (the blocking pool's
    /// [`PoolStats`], `driver` = `tokio`).
    pub fn stats(&self) -> PoolStats {
        let containment = crate::cgroup::containment_report(self.shared.config.containment());
        self.shared
            .lock()
            .stats(Instant::now(), containment, "tokio")
    }

    /// Whether the restart budget is spent.
    pub fn is_quarantined(&self) -> bool {
        self.shared.lock().is_quarantined()
    }

    /// Lift a quarantine and forget all failures; returns whether the pool
    /// was quarantined.
    pub fn reset(&self) -> bool {
        let was = self.shared.lock().reset();
        self.shared.changed.notify_waiters();
        self.shared.keeper_wake.notify_one();
        was
    }

    /// Stop the pool: refuse new calls, cancel busy requests (their
    /// workers are killed and reaped by the calls that hold them), close
    /// every idle worker and warm spare (graceful when `bound` leaves room:
    /// input closed, [`SHUTDOWN_GRACE`] to exit), wait up to `bound` for
    /// busy members, and end the keeper task. Idempotent; dropping the pool
    /// does the same without waiting.
    pub async fn shutdown(&self, bound: Duration) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + bound;
        let shared = &self.shared;
        let closed = shared.lock().close();
        shared.token.cancel();
        shared.changed.notify_waiters();
        shared.keeper_wake.notify_one();
        let (mut report, workers) = ShutdownReport::of_close(closed);
        let graceful = bound >= SHUTDOWN_GRACE + PIPE_RELEASE_WAIT;
        if graceful {
            // In parallel; if this future is dropped, the set aborts the
            // tasks, which drops (kills and reaps) their workers.
            let mut ends = ::tokio::task::JoinSet::new();
            for worker in workers {
                ends.spawn(async move {
                    let pid = worker.pid();
                    worker
                        .shutdown()
                        .await
                        .err()
                        .map(|error| format!("worker {pid}: {error}"))
                });
            }
            while let Some(ended) = ends.join_next().await {
                match ended {
                    Ok(Some(problem)) => report.problems.push(problem),
                    Ok(None) => {}
                    Err(error) => report
                        .problems
                        .push(format!("a worker's shutdown task failed: {error}")),
                }
            }
        } else {
            drop(workers);
        }
        let still_busy = loop {
            let notified = shared.changed.notified();
            let busy = shared.lock().busy();
            if busy == 0 || Instant::now() >= deadline {
                break busy;
            }
            let _ = ::tokio::time::timeout_at(deadline.into(), notified).await;
        };
        report.busy_left(&self.name, still_busy, bound);
        let keeper = self
            .keeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(keeper) = keeper
            && let Err(error) = keeper.await
            && error.is_panic()
        {
            report
                .problems
                .push(format!("{}: the spare keeper task panicked", self.name));
        }
        report.elapsed = started.elapsed();
        report
    }

    /// Wait for a member: dispatched, queued (bounded in length and time),
    /// or refused. A caller whose future is dropped while queued leaves
    /// the queue.
    async fn checkout(&self) -> Result<HeldLease<'_>, Error> {
        let shared = &self.shared;
        let queue_deadline = Instant::now() + shared.lock().options().queue_timeout();
        let mut place = QueuePlace {
            shared,
            ticket: None,
        };
        loop {
            let notified = shared.changed.notified();
            ::tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let dispatched = {
                let mut core = shared.lock();
                let dispatched = core.checkout(
                    place.ticket,
                    shared.token.is_cancelled(),
                    now,
                    queue_deadline,
                );
                if matches!(dispatched, Dispatch::Run(_)) && core.has_waiters() {
                    shared.changed.notify_waiters();
                }
                dispatched
            };
            match dispatched {
                Dispatch::Run(lease) => {
                    place.ticket = None;
                    return Ok(HeldLease {
                        shared,
                        lease: Some(lease),
                    });
                }
                Dispatch::Refused(error) => {
                    place.ticket = None;
                    shared.changed.notify_waiters();
                    return Err(error);
                }
                Dispatch::Queued(ticket) => {
                    place.ticket = Some(ticket);
                    let _ = ::tokio::time::timeout_at(queue_deadline.into(), notified).await;
                }
            }
        }
    }
}

impl Drop for WorkerPool {
    /// Close the pool without waiting: refuse calls, cancel the busy ones,
    /// kill and reap idle workers and spares here, and let the keeper task
    /// end by itself (it kills and reaps a spare it was starting).
    fn drop(&mut self) {
        let closed = self.shared.lock().close();
        self.shared.token.cancel();
        self.shared.changed.notify_waiters();
        self.shared.keeper_wake.notify_one();
        drop(closed.idle);
        drop(closed.spares);
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("name", &self.name)
            .field("policy", &self.shared.config.policy())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PoolCore<Worker>> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The keeper task: start spares until the pool closes.
    async fn keep(&self) {
        loop {
            let notified = self.keeper_wake.notified();
            ::tokio::pin!(notified);
            notified.as_mut().enable();
            let chore = self
                .lock()
                .keeper_chore(self.token.is_cancelled(), Instant::now());
            match chore {
                Chore::Wait(None) => notified.await,
                Chore::Wait(Some(at)) => {
                    let _ = ::tokio::time::timeout_at(at.into(), notified).await;
                }
                Chore::Stop(spares) => {
                    drop(spares);
                    return;
                }
                Chore::Start(generation) => {
                    let started = match start_worker(&self.config, &generation).await {
                        Ok(mut worker) => worker.eval("return nil").await.map(|_| worker),
                        Err(error) => Err(error),
                    };
                    let retire = self.lock().spare_started(
                        generation.number,
                        started,
                        self.token.is_cancelled(),
                        Instant::now(),
                    );
                    self.changed.notify_waiters();
                    drop(retire);
                }
            }
        }
    }
}

/// A place in the queue, left when dropped (a caller's future dropped
/// while it waited).
struct QueuePlace<'a> {
    shared: &'a Shared,
    ticket: Option<u64>,
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.lock().leave_queue(Some(ticket));
            self.shared.changed.notify_waiters();
        }
    }
}

/// A member taken out of the pool, put back when the call returns — or,
/// if the call's future is dropped, when this is dropped (counted as a
/// cancellation; the worker it held was dropped with the call, which
/// killed and reaped it).
struct HeldLease<'a> {
    shared: &'a Shared,
    lease: Option<Lease<Worker>>,
}

impl HeldLease<'_> {
    fn checkin(mut self, worker: Worker, outcome: Result<(), &Error>) -> Vec<Worker> {
        let Some(lease) = self.lease.take() else {
            return vec![worker];
        };
        let retire = self
            .shared
            .lock()
            .checkin(lease, worker, outcome, Instant::now());
        self.shared.changed.notify_waiters();
        self.shared.keeper_wake.notify_one();
        retire
    }

    fn start_failed(mut self, error: &Error) -> Vec<Worker> {
        let Some(lease) = self.lease.take() else {
            return Vec::new();
        };
        let retire = self
            .shared
            .lock()
            .start_failed(lease, error, Instant::now());
        self.shared.changed.notify_waiters();
        retire
    }
}

impl Drop for HeldLease<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let retire = self.shared.lock().abandoned(lease, Instant::now());
            self.shared.changed.notify_waiters();
            drop(retire);
        }
    }
}

/// Spawn, initialize and (for a plugin) load one worker of `generation`.
async fn start_worker(config: &WorkerConfig, generation: &Generation) -> Result<Worker, Error> {
    let mut worker = Worker::spawn(config.clone()).await?;
    if let Program::Plugin {
        source,
        source_name,
        ..
    } = &generation.program
    {
        worker.load_plugin(source, source_name).await?;
    }
    Ok(worker)
}

/// Start `count` workers of generation 1; the first decides a plugin's
/// registrations. Any failure drops (kills and reaps) what was started.
async fn start_generation(
    config: &WorkerConfig,
    plugin: Option<(String, String)>,
    count: usize,
) -> Result<(Generation, Vec<Worker>), Error> {
    let mut workers = Vec::with_capacity(count);
    let program = match plugin {
        None => Program::Bare,
        Some((source, source_name)) => {
            let mut first = Worker::spawn(config.clone()).await?;
            let registrations = first.load_plugin(&source, &source_name).await?;
            workers.push(first);
            Program::Plugin {
                source,
                source_name,
                registrations,
            }
        }
    };
    let generation = Generation { number: 1, program };
    while workers.len() < count {
        workers.push(start_worker(config, &generation).await?);
    }
    Ok((generation, workers))
}
