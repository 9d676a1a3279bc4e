//! The blocking pool driver shared by [`WorkerPool`](super::WorkerPool) and
//! [`PluginHost`](super::PluginHost): the supervision core's
//! [`PoolCore`] behind a mutex, condition variables for waiting callers
//! and the keeper, and the keeper thread.
//!
//! A call runs on the caller's thread: it takes a member out of the core
//! under the lock (waiting in the queue if none is idle), runs the
//! request with the lock released, and puts the member back. The lock is
//! never held while a worker runs, starts or is killed, so one member's
//! slow or failing request never blocks the others. Every decision
//! (dispatch, the budget, quarantine, spares, counters) is the core's.
//!
//! A pool configured with warm spares owns one thread, the *keeper*: it
//! starts spares off the callers' path and exits when the pool closes
//! ([`Driver::shutdown`] joins it). Shutdown also starts scoped threads to
//! close idle workers in parallel, joined before it returns.

use quirl_lua_protocol::ErrorContext;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cancel::Cancel;
use crate::error::{Error, ErrorClass};
use crate::supervision::pool::{Chore, Dispatch, Generation, PoolCore, PoolOptions, Program};
use crate::supervision::stats::PoolStats;
use crate::worker::{PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, Worker, WorkerConfig};

pub use crate::supervision::pool::shutdown::ShutdownReport;

/// A blocking pool: the shared state plus its keeper thread.
pub(crate) struct Driver {
    name: String,
    shared: Arc<Shared>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    config: WorkerConfig,
    /// Fired once, at shutdown (or by the caller): cancels every request
    /// and start in flight.
    token: Cancel,
    core: Mutex<PoolCore<Worker>>,
    /// Wakes queued callers and a shutdown waiting for busy members.
    changed: Condvar,
    /// Wakes the keeper.
    keeper_wake: Condvar,
}

impl Driver {
    /// Start `options.size()` workers of generation 1 (`plugin`: source
    /// and name) and the keeper if the pool keeps spares. Any failure
    /// kills and reaps every worker started.
    pub(crate) fn start(
        name: String,
        config: WorkerConfig,
        options: PoolOptions,
        plugin: Option<(String, String)>,
    ) -> Result<Self, Error> {
        options.validate()?;
        let token = config.cancel().cloned().unwrap_or_default();
        let config = config.with_cancel(token.clone());
        let (generation, workers) = start_generation(&config, 1, plugin, options.size())?;
        let shared = Arc::new(Shared {
            config,
            token,
            core: Mutex::new(PoolCore::new(name.clone(), options, generation, workers)),
            changed: Condvar::new(),
            keeper_wake: Condvar::new(),
        });
        let keeper = (options.spares() > 0)
            .then(|| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("quirl-lua-spares".to_owned())
                    .spawn(move || shared.keep())
                    .ok()
            })
            .flatten();
        Ok(Self {
            name,
            shared,
            keeper: Mutex::new(keeper),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn config(&self) -> &WorkerConfig {
        &self.shared.config
    }

    pub(crate) fn options(&self) -> PoolOptions {
        self.shared.lock().options()
    }

    /// The generation now serving.
    pub(crate) fn generation(&self) -> Arc<Generation> {
        self.shared.lock().generation()
    }

    /// Dispatch one call to a member and run `f` on its worker (starting
    /// a worker first if the member has none). A worker that ended is
    /// replaced before any request is sent into it (by a warm spare, or by
    /// the worker handle's own restart), so `f` runs once.
    pub(crate) fn call<T>(
        &self,
        f: impl FnOnce(&mut Worker, &Generation) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let shared = &self.shared;
        let queue_deadline = Instant::now() + shared.lock().options().queue_timeout();
        let mut ticket = None;
        let mut core = shared.lock();
        let mut lease = loop {
            let now = Instant::now();
            match core.checkout(ticket, shared.token.is_cancelled(), now, queue_deadline) {
                Dispatch::Run(lease) => {
                    if core.has_waiters() {
                        // The next in line may find another idle member.
                        shared.changed.notify_all();
                    }
                    break lease;
                }
                Dispatch::Refused(error) => {
                    drop(core);
                    shared.changed.notify_all();
                    return Err(error);
                }
                Dispatch::Queued(held) => {
                    ticket = Some(held);
                    let wait = queue_deadline.saturating_duration_since(now);
                    core = shared
                        .changed
                        .wait_timeout(core, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        };
        drop(core);
        let mut worker = match lease.worker.take() {
            Some(worker) => worker,
            None => match start_worker(&shared.config, &lease.generation) {
                Ok(worker) => {
                    shared.lock().started(&mut lease, &worker);
                    shared.keeper_wake.notify_one();
                    worker
                }
                Err(error) => {
                    let error = error.with_context(format!(
                        "could not start a worker for member {}",
                        lease.index
                    ));
                    let retire = shared.lock().start_failed(lease, &error, Instant::now());
                    shared.notify_after_checkin();
                    drop(retire);
                    return Err(error);
                }
            },
        };
        let generation = Arc::clone(&lease.generation);
        let result = f(&mut worker, &generation);
        let retire =
            shared
                .lock()
                .checkin(lease, worker, result.as_ref().map(|_| ()), Instant::now());
        shared.notify_after_checkin();
        // Killed and reaped here, outside the lock.
        drop(retire);
        result
    }

    /// Install a new generation whose workers the caller started.
    pub(crate) fn install(
        &self,
        generation: Generation,
        workers: Vec<Worker>,
    ) -> Result<(), Error> {
        let installed = self.shared.lock().install(generation, workers);
        self.shared.changed.notify_all();
        self.shared.keeper_wake.notify_one();
        match installed {
            Ok(retire) => {
                drop(retire);
                Ok(())
            }
            Err((error, workers)) => {
                drop(workers);
                Err(error)
            }
        }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let containment = crate::cgroup::containment_report(self.shared.config.containment());
        self.shared
            .lock()
            .stats(Instant::now(), containment, "blocking")
    }

    pub(crate) fn is_quarantined(&self) -> bool {
        self.shared.lock().is_quarantined()
    }

    pub(crate) fn reset(&self) -> bool {
        let was = self.shared.lock().reset();
        self.shared.changed.notify_all();
        self.shared.keeper_wake.notify_one();
        was
    }

    /// Refuse new calls, cancel the busy ones, close idle workers and
    /// spares, wait up to `bound` for busy members, and join the keeper.
    ///
    /// Idle workers get their input closed and [`SHUTDOWN_GRACE`] to exit
    /// by themselves when `bound` leaves room for it, and are killed
    /// otherwise; either way they are reaped before this returns. Returns
    /// within about `bound` (plus [`PIPE_RELEASE_WAIT`] if a killed worker's
    /// pipe is held by an escaped process). Idempotent.
    pub(crate) fn shutdown(&self, bound: Duration) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + bound;
        let shared = &self.shared;
        let closed = shared.lock().close();
        shared.token.cancel();
        shared.changed.notify_all();
        shared.keeper_wake.notify_all();
        let (mut report, workers) = ShutdownReport::of_close(closed);
        report.problems = retire_all(workers, deadline);
        let mut core = shared.lock();
        let still_busy = loop {
            let busy = core.busy();
            let now = Instant::now();
            if busy == 0 || now >= deadline {
                break busy;
            }
            core = shared
                .changed
                .wait_timeout(core, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        drop(core);
        let name = &self.name;
        report.busy_left(name, still_busy, bound);
        let keeper = self
            .keeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(keeper) = keeper
            && keeper.join().is_err()
        {
            report
                .problems
                .push(format!("{name}: the spare keeper thread panicked"));
        }
        report.elapsed = started.elapsed();
        report
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PoolCore<Worker>> {
        // A panic while the lock is held leaves counters at worst stale;
        // the slots are only ever replaced whole.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake whoever waits for a member or for the pool to quiesce (queued
    /// callers, a shutdown), and the keeper (a spare may have been taken).
    fn notify_after_checkin(&self) {
        self.changed.notify_all();
        self.keeper_wake.notify_one();
    }

    /// The keeper thread: start spares until the pool closes. Anything it
    /// holds when the pool closes is killed and reaped before it returns.
    fn keep(&self) {
        loop {
            let chore = {
                let mut core = self.lock();
                loop {
                    match core.keeper_chore(self.token.is_cancelled(), Instant::now()) {
                        Chore::Wait(None) => {
                            core = self
                                .keeper_wake
                                .wait(core)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                        Chore::Wait(Some(at)) => {
                            let wait = at.saturating_duration_since(Instant::now());
                            core = self
                                .keeper_wake
                                .wait_timeout(core, wait)
                                .unwrap_or_else(PoisonError::into_inner)
                                .0;
                        }
                        chore => break chore,
                    }
                }
            };
            match chore {
                Chore::Start(generation) => {
                    // One `eval "return nil"` warms the spare (its first
                    // request pays for page faults and a compile); it
                    // changes no global.
                    let started = start_worker(&self.config, &generation).and_then(|mut worker| {
                        worker.eval("return nil")?;
                        Ok(worker)
                    });
                    let retire = self.lock().spare_started(
                        generation.number,
                        started,
                        self.token.is_cancelled(),
                        Instant::now(),
                    );
                    self.changed.notify_all();
                    drop(retire);
                }
                Chore::Stop(spares) => {
                    drop(spares);
                    return;
                }
                Chore::Wait(_) => {}
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.shutdown(super::DEFAULT_SHUTDOWN_BOUND);
    }
}

/// Spawn, initialize and (for a plugin) load one worker of `generation`.
/// Any failure kills and reaps what was started.
pub(crate) fn start_worker(
    config: &WorkerConfig,
    generation: &Generation,
) -> Result<Worker, Error> {
    let mut worker = Worker::spawn(config.clone())?;
    if let Program::Plugin {
        source,
        source_name,
        ..
    } = &generation.program
    {
        worker.load_plugin(source, source_name)?;
    }
    Ok(worker)
}

/// Start `count` workers of a new generation: the first one decides the
/// plugin's registrations, the others are loaded the same way. Any
/// failure kills and reaps every worker started so far.
pub(crate) fn start_generation(
    config: &WorkerConfig,
    number: u64,
    plugin: Option<(String, String)>,
    count: usize,
) -> Result<(Generation, Vec<Worker>), Error> {
    let mut workers = Vec::with_capacity(count);
    let program = match plugin {
        None => Program::Bare,
        Some((source, source_name)) => {
            let mut first = Worker::spawn(config.clone())?;
            let registrations = first.load_plugin(&source, &source_name)?;
            workers.push(first);
            Program::Plugin {
                source,
                source_name,
                registrations,
            }
        }
    };
    let generation = Generation { number, program };
    while workers.len() < count {
        workers.push(start_worker(config, &generation)?);
    }
    Ok((generation, workers))
}

/// Close idle workers: graceful when `deadline` leaves room, in parallel,
/// joined before returning.
fn retire_all(workers: Vec<Worker>, deadline: Instant) -> Vec<String> {
    let graceful =
        deadline.saturating_duration_since(Instant::now()) >= SHUTDOWN_GRACE + PIPE_RELEASE_WAIT;
    if !graceful {
        // Dropping kills the group and reaps; no grace to wait for.
        drop(workers);
        return Vec::new();
    }
    if workers.len() <= 1 {
        return workers.into_iter().filter_map(retire_one).collect();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(index, worker)| {
                std::thread::Builder::new()
                    .name(format!("quirl-lua-retire-{index}"))
                    .spawn_scoped(scope, move || retire_one(worker))
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| match handle {
                Ok(handle) => handle.join().unwrap_or_else(|_| {
                    Some("a retiring thread panicked; its worker was dropped".to_owned())
                }),
                // The worker moved into the closure that never ran was
                // dropped with it: killed and reaped.
                Err(error) => Some(format!("could not start a retiring thread: {error}")),
            })
            .collect()
    })
}

fn retire_one(worker: Worker) -> Option<String> {
    let pid = worker.pid();
    worker
        .shutdown()
        .err()
        .filter(|error| error.class() != ErrorClass::Unavailable)
        .map(|error| format!("worker {pid}: {error}"))
}
