//! The pool core shared by [`WorkerPool`](super::WorkerPool) and
//! [`PluginHost`](super::PluginHost): members, dispatch, the bounded queue,
//! the restart budget, quarantine, reload installation, stats and shutdown.
//!
//! A call runs on the caller's thread: it takes an idle member out of the
//! pool under the lock (waiting in the queue if none is idle), runs the
//! request with the lock released, and puts the member back. The lock is
//! never held while a worker runs, starts or is killed, so one member's slow
//! or failing request never blocks the others.
//!
//! A pool configured with warm spares (DESIGN §17.7) owns one thread, the
//! *keeper*: it starts spares off the callers' path, checks whether a
//! worker swapped out after a tripped limit retired, and exits when the
//! pool shuts down ([`Core::shutdown`] joins it). [`Shared::shutdown_members`] also
//! starts scoped threads to retire idle workers in parallel, joined before
//! it returns.
//!
//! This file holds the types and the core (construction, reload
//! installation, the errors); the jobs live in submodules: `dispatch`
//! (checkout, running a call, checkin), `spares` (the keeper, suspects,
//! quarantine), `snapshot` (stats) and `shutdown`.

mod dispatch;
mod shutdown;
mod snapshot;
mod spares;

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, PluginRegistrations};

use crate::error::{Error, ErrorClass};
use crate::process_host::Cancel;
use crate::worker::{Worker, WorkerConfig};

use super::budget::RestartBudget;
use super::manifest::PoolOptions;
use super::stats::{Counters, LatencyRing};

pub use shutdown::ShutdownReport;

/// One code generation: what every worker of the pool is loaded with.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) number: u64,
    pub(crate) program: Program,
}

/// What a fresh worker is given after `initialize`.
#[derive(Debug)]
pub(crate) enum Program {
    /// Nothing: a pool of plain eval workers.
    Bare,
    /// A plugin, loaded with `load_plugin` into every worker.
    Plugin {
        source: String,
        source_name: String,
        registrations: PluginRegistrations,
    },
}

/// A pool: the shared core plus its keeper thread, if it keeps spares.
pub(crate) struct Core {
    shared: Arc<Shared>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Deref for Core {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

pub(crate) struct Shared {
    name: String,
    options: PoolOptions,
    config: WorkerConfig,
    /// Fired once, at shutdown: cancels every request and start in flight.
    shutdown_token: Cancel,
    state: Mutex<State>,
    changed: Condvar,
    /// Wakes the keeper: a spare was taken, a worker awaits its
    /// retirement check, the generation changed, or the pool is closing.
    keeper_wake: Condvar,
}

struct State {
    generation: Arc<Generation>,
    members: Vec<Member>,
    /// Where the round-robin scan for an idle member starts.
    cursor: usize,
    /// Tickets of waiting callers, first come first served.
    queue: VecDeque<u64>,
    next_ticket: u64,
    budget: RestartBudget,
    quarantine: Option<Quarantine>,
    closing: bool,
    rejected: u64,
    last_error: Option<(ErrorCode, &'static str)>,
    /// Warm spares, ready to take a member's slot.
    spares: Vec<Spare>,
    /// The keeper is starting a spare.
    spare_starting: bool,
    /// A spare start failed: no further spare is started until a restart
    /// on a caller's path succeeds, a reload installs a generation, or a
    /// reset (DESIGN §17.7).
    spares_paused: bool,
    /// Workers swapped out after answering with a tripped limit, waiting
    /// for the keeper to check whether they retired.
    suspects: Vec<Suspect>,
    spare_counters: SpareCounters,
    /// No spare start before this instant (see
    /// [`SPARE_RESTART_DELAY`](spares::SPARE_RESTART_DELAY)).
    spares_not_before: Option<Instant>,
}

struct Spare {
    generation: u64,
    worker: Worker,
}

struct Suspect {
    index: usize,
    worker: Worker,
}

#[derive(Default, Clone, Copy)]
struct SpareCounters {
    started: u64,
    used: u64,
    failures: u64,
}

struct Quarantine {
    since: Instant,
    failures: usize,
    cause: String,
}

struct Member {
    slot: Slot,
    /// Generation of the member's current (or last) worker.
    generation: u64,
    pid: Option<u32>,
    /// A worker of a newer generation, installed by a reload while the
    /// member was busy; it replaces the old worker when the call returns.
    pending: Option<Worker>,
    counters: Counters,
    latency: LatencyRing,
    last_error: Option<(ErrorCode, &'static str)>,
}

enum Slot {
    Idle(Box<Worker>),
    Busy,
    /// No worker; the next call dispatched here starts one.
    /// `after_failure`: that start is a restart.
    Vacant {
        after_failure: bool,
    },
}

/// A member taken out of the pool for one call.
struct Checkout {
    index: usize,
    worker: Option<Worker>,
    generation: Arc<Generation>,
}

impl Core {
    /// Start `workers` (already spawned and loaded with `generation`) as
    /// the pool's members, and the keeper thread if the pool keeps spares.
    pub(crate) fn new(
        name: String,
        options: PoolOptions,
        config: WorkerConfig,
        shutdown_token: Cancel,
        generation: Generation,
        workers: Vec<Worker>,
    ) -> Self {
        let shared = Arc::new(Shared::new(
            name,
            options,
            config,
            shutdown_token,
            generation,
            workers,
        ));
        let keeper = (options.spare_count() > 0)
            .then(|| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("quirl-lua-spares".to_owned())
                    .spawn(move || shared.keep())
                    .ok()
            })
            .flatten();
        if keeper.is_none() && options.spare_count() > 0 {
            // No thread, no spares: replacements start on the caller's
            // path, as with `spares(0)`.
            shared.lock().spares_paused = true;
        }
        Self {
            shared,
            keeper: Mutex::new(keeper),
        }
    }
}

impl Shared {
    fn new(
        name: String,
        options: PoolOptions,
        config: WorkerConfig,
        shutdown_token: Cancel,
        generation: Generation,
        workers: Vec<Worker>,
    ) -> Self {
        let number = generation.number;
        let members = workers
            .into_iter()
            .map(|worker| Member {
                generation: number,
                pid: Some(worker.pid()),
                slot: Slot::Idle(Box::new(worker)),
                pending: None,
                counters: Counters::default(),
                latency: LatencyRing::default(),
                last_error: None,
            })
            .collect();
        Self {
            name,
            options,
            config,
            shutdown_token,
            state: Mutex::new(State {
                generation: Arc::new(generation),
                members,
                cursor: 0,
                queue: VecDeque::new(),
                next_ticket: 0,
                budget: RestartBudget::new(options.restart_budget(), options.forgiveness_window()),
                quarantine: None,
                closing: false,
                rejected: 0,
                last_error: None,
                spares: Vec::new(),
                spare_starting: false,
                spares_paused: false,
                suspects: Vec::new(),
                spare_counters: SpareCounters::default(),
                spares_not_before: None,
            }),
            changed: Condvar::new(),
            keeper_wake: Condvar::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn config(&self) -> &WorkerConfig {
        &self.config
    }

    pub(crate) fn options(&self) -> PoolOptions {
        self.options
    }

    pub(crate) fn shutdown_token(&self) -> &Cancel {
        &self.shutdown_token
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held leaves counters at worst stale;
        // the slots are only ever replaced whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The generation now serving.
    pub(crate) fn generation(&self) -> Arc<Generation> {
        Arc::clone(&self.lock().generation)
    }

    /// Install a new generation whose workers were started by the caller.
    /// On refusal (the pool is shutting down) the workers are handed back.
    pub(crate) fn install(
        &self,
        generation: Generation,
        workers: Vec<Worker>,
    ) -> Result<(), (Error, Vec<Worker>)> {
        let mut state = self.lock();
        if state.closing {
            drop(state);
            return Err((self.shut_down_error(), workers));
        }
        let number = generation.number;
        state.generation = Arc::new(generation);
        let mut retire = Vec::new();
        for (member, fresh) in state.members.iter_mut().zip(workers) {
            match std::mem::replace(
                &mut member.slot,
                Slot::Vacant {
                    after_failure: false,
                },
            ) {
                Slot::Busy => {
                    member.slot = Slot::Busy;
                    retire.extend(member.pending.replace(fresh));
                }
                Slot::Idle(old) => {
                    retire.push(*old);
                    member.pid = Some(fresh.pid());
                    member.generation = number;
                    member.slot = Slot::Idle(Box::new(fresh));
                }
                Slot::Vacant { .. } => {
                    member.pid = Some(fresh.pid());
                    member.generation = number;
                    member.slot = Slot::Idle(Box::new(fresh));
                }
            }
        }
        // Spares of the old generation go; the keeper starts new ones.
        retire.extend(state.spares.drain(..).map(|spare| spare.worker));
        state.spares_paused = false;
        drop(state);
        self.changed.notify_all();
        self.keeper_wake.notify_one();
        drop(retire);
        Ok(())
    }

    fn shut_down_error(&self) -> Error {
        Error::new(
            ErrorClass::Unavailable,
            ErrorCode::Lua,
            format!("`{}` was shut down", self.name),
        )
        .with_help("start a new pool or plugin host")
    }

    fn cancelled_error(&self) -> Error {
        Error::new(
            ErrorClass::Cancelled,
            ErrorCode::ResourceLimit,
            format!("`{}` was cancelled", self.name),
        )
        .with_context("its cancellation token fired; no further call is accepted")
    }

    fn quarantine_error(&self, state: &State) -> Error {
        let mut error = Error::new(
            ErrorClass::Quarantined,
            ErrorCode::Lua,
            format!("`{}` is quarantined", self.name),
        );
        if let Some(quarantine) = &state.quarantine {
            let window = match state.budget.window() {
                Some(window) => format!("within {} s", window.as_secs_f64()),
                None => "in its lifetime".to_owned(),
            };
            error = error
                .with_context(format!(
                    "{} worker failures {window} exceeded the restart budget of {}; quarantined {} ms ago",
                    quarantine.failures,
                    state.budget.max_restarts(),
                    quarantine.since.elapsed().as_millis()
                ))
                .with_context(format!("last failure: {}", quarantine.cause));
        }
        error.with_help("fix the plugin, reload it if needed, then reset it to lift the quarantine")
    }

    fn overloaded(&self, state: &State, why: String) -> Error {
        Error::new(
            ErrorClass::Overloaded,
            ErrorCode::ResourceLimit,
            format!("`{}` is overloaded", self.name),
        )
        .with_context(why)
        .with_context(format!(
            "pool size {}, queue capacity {}",
            state.members.len(),
            self.options.waiting_capacity()
        ))
        .with_help("retry later, or raise the pool size or queue capacity")
    }
}

/// Spawn, initialize and (for a plugin) load one worker of `generation`.
/// Any failure kills and reaps what was started.
pub(crate) fn start_worker(
    config: &WorkerConfig,
    token: &Cancel,
    generation: &Generation,
) -> Result<Worker, Error> {
    let mut worker = Worker::spawn(config.clone().cancel_token(token.clone()))?;
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
    token: &Cancel,
    number: u64,
    plugin: Option<(String, String)>,
    count: usize,
) -> Result<(Generation, Vec<Worker>), Error> {
    let mut workers = Vec::with_capacity(count);
    let program = match plugin {
        None => Program::Bare,
        Some((source, source_name)) => {
            let mut first = Worker::spawn(config.clone().cancel_token(token.clone()))?;
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
        workers.push(start_worker(config, token, &generation)?);
    }
    Ok((generation, workers))
}
