//! The pool core (DESIGN §17.7): members, dispatch, the bounded queue,
//! the restart budget, quarantine, warm spares, generations and the
//! counters — one state machine for the blocking and the async pools.
//!
//! [`PoolCore`] holds the state and makes every decision; it is handed the
//! time and the workers, and returns the workers it no longer wants
//! (to be dropped, which kills and reaps them, outside the driver's
//! lock). A driver owns it behind a mutex, runs calls on the workers it
//! leases with the lock released, starts workers and spares, and wakes
//! waiting callers: the blocking driver with condition variables and a
//! keeper thread ([`crate::lifecycle`]), the async one with `Notify` and a
//! keeper task (`tokio_worker::WorkerPool`).
//!
//! Submodules: `options` ([`PoolOptions`]), `dispatch` (checkout, checkin),
//! `spares` (the keeper's chores, quarantine, reset), `snapshot` (stats),
//! `shutdown` (the [`ShutdownReport`](shutdown::ShutdownReport)).

mod dispatch;
pub(crate) mod options;
pub(crate) mod shutdown;
mod snapshot;
mod spares;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, PluginRegistrations};

use super::budget::RestartBudget;
use super::life::Life;
use super::stats::{Counters, LatencyRing};
use crate::error::{Error, ErrorClass};

pub(crate) use dispatch::Dispatch;
#[cfg(any(test, feature = "tokio"))]
pub(crate) use dispatch::Lease;
pub(crate) use options::PoolOptions;
pub(crate) use spares::Chore;

/// What a pool needs to know of a worker it holds.
pub(crate) trait PoolWorker {
    /// The worker's current (or last) process id.
    fn pid(&self) -> u32;
    /// Whether its process has ended (a failure, or a retirement after a
    /// tripped limit): a call would start a fresh one first.
    fn has_ended(&self) -> bool;
    /// Fresh processes it started after its first (see `Life::restarts`).
    fn restarts(&self) -> u64;
    /// Processes it found dead between calls.
    fn found_dead(&self) -> u64;
    /// Processes it found retired between calls (SPEC §13.1-a).
    fn found_retired(&self) -> u64;
}

/// A driver's worker: its counts are those of its [`Life`], so both
/// drivers are pool workers through this one implementation.
pub(crate) trait Supervised {
    /// The worker's life: its process, restarts and findings.
    fn life(&self) -> &Life;
    /// Whether its process has ended (see [`PoolWorker::has_ended`]).
    fn has_ended(&self) -> bool;
}

impl<T: Supervised> PoolWorker for T {
    fn pid(&self) -> u32 {
        self.life().pid()
    }
    fn has_ended(&self) -> bool {
        Supervised::has_ended(self)
    }
    fn restarts(&self) -> u64 {
        self.life().restarts()
    }
    fn found_dead(&self) -> u64 {
        self.life().found_dead()
    }
    fn found_retired(&self) -> u64 {
        self.life().found_retired()
    }
}

/// One code generation: what every worker of the pool is loaded with.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) number: u64,
    pub(crate) program: Program,
}

/// What a fresh worker of a generation is given after `initialize`.
#[derive(Debug)]
pub(crate) enum Program {
    /// Nothing: a pool of plain workers.
    Bare,
    /// A plugin, loaded with `load_plugin` into every worker.
    Plugin {
        source: String,
        source_name: String,
        registrations: PluginRegistrations,
    },
}

/// A pool's state (see the module docs).
pub(crate) struct PoolCore<W> {
    name: String,
    options: PoolOptions,
    generation: Arc<Generation>,
    members: Vec<Member<W>>,
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
    spares: Vec<Spare<W>>,
    /// The keeper is starting a spare.
    spare_starting: bool,
    /// A spare start failed: no further spare is started until a start on
    /// a caller's path succeeds, a reload installs a generation, or a reset.
    spares_paused: bool,
    spare_counters: SpareCounters,
    /// No spare start before this instant (a spare was just taken: leave
    /// the CPU to the call it was taken for).
    spares_not_before: Option<Instant>,
}

struct Spare<W> {
    generation: u64,
    worker: W,
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

struct Member<W> {
    slot: Slot<W>,
    /// Generation of the member's current (or last) worker.
    generation: u64,
    pid: Option<u32>,
    /// A worker of a newer generation, installed by a reload while the
    /// member was busy; it replaces the old worker when the call returns.
    pending: Option<W>,
    counters: Counters,
    latency: LatencyRing,
    last_error: Option<(ErrorCode, &'static str)>,
}

enum Slot<W> {
    /// A worker waiting for a call (its process may have ended: then its
    /// next call starts a fresh one, unless a spare replaces it first).
    Idle(W),
    Busy,
    /// No worker; the next call dispatched here starts one.
    /// `after_failure`: that start is a restart.
    Vacant {
        after_failure: bool,
    },
}

impl<W: PoolWorker> PoolCore<W> {
    /// A pool serving `generation` on `workers` (already started and
    /// loaded), one member each.
    pub(crate) fn new(
        name: String,
        options: PoolOptions,
        generation: Generation,
        workers: Vec<W>,
    ) -> Self {
        let number = generation.number;
        let members = workers
            .into_iter()
            .map(|worker| Member {
                generation: number,
                pid: Some(worker.pid()),
                slot: Slot::Idle(worker),
                pending: None,
                counters: Counters::default(),
                latency: LatencyRing::default(),
                last_error: None,
            })
            .collect();
        Self {
            name,
            options,
            generation: Arc::new(generation),
            members,
            cursor: 0,
            queue: VecDeque::new(),
            next_ticket: 0,
            budget: RestartBudget::new(options.max_restarts(), options.restart_window()),
            quarantine: None,
            closing: false,
            rejected: 0,
            last_error: None,
            spares: Vec::new(),
            spare_starting: false,
            spares_paused: false,
            spare_counters: SpareCounters::default(),
            spares_not_before: None,
        }
    }

    pub(crate) fn options(&self) -> PoolOptions {
        self.options
    }

    /// The generation now serving.
    pub(crate) fn generation(&self) -> Arc<Generation> {
        Arc::clone(&self.generation)
    }

    pub(crate) fn is_quarantined(&self) -> bool {
        self.quarantine.is_some()
    }

    /// Callers are waiting in the queue.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Members running a call right now.
    pub(crate) fn busy(&self) -> usize {
        self.members
            .iter()
            .filter(|member| matches!(member.slot, Slot::Busy))
            .count()
    }

    /// Install a new generation whose workers the caller started; returns
    /// the workers it replaced. On refusal (the pool is closing) the new
    /// workers are handed back with the error.
    pub(crate) fn install(
        &mut self,
        generation: Generation,
        workers: Vec<W>,
    ) -> Result<Vec<W>, (Error, Vec<W>)> {
        if self.closing {
            return Err((self.shut_down_error(), workers));
        }
        let number = generation.number;
        self.generation = Arc::new(generation);
        let mut retire = Vec::new();
        for (member, fresh) in self.members.iter_mut().zip(workers) {
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
                    retire.push(old);
                    member.pid = Some(fresh.pid());
                    member.generation = number;
                    member.slot = Slot::Idle(fresh);
                }
                Slot::Vacant { .. } => {
                    member.pid = Some(fresh.pid());
                    member.generation = number;
                    member.slot = Slot::Idle(fresh);
                }
            }
        }
        // Spares of the old generation go; the keeper starts new ones.
        retire.extend(self.spares.drain(..).map(|spare| spare.worker));
        self.spares_paused = false;
        Ok(retire)
    }

    /// Refuse every later call and hand over what is idle: the idle
    /// workers (with pending replacements), the spares, and how many
    /// members are busy (their calls still hold them). Idempotent: a
    /// second call returns nothing and `first == false`.
    pub(crate) fn close(&mut self) -> Closed<W> {
        let first = !self.closing;
        self.closing = true;
        let mut closed = Closed {
            first,
            idle: Vec::new(),
            spares: Vec::new(),
            busy: 0,
        };
        for member in &mut self.members {
            closed.idle.extend(member.pending.take());
            match std::mem::replace(
                &mut member.slot,
                Slot::Vacant {
                    after_failure: false,
                },
            ) {
                Slot::Idle(worker) => closed.idle.push(worker),
                Slot::Busy => {
                    member.slot = Slot::Busy;
                    closed.busy += 1;
                }
                vacant @ Slot::Vacant { .. } => member.slot = vacant,
            }
        }
        closed.spares = self.spares.drain(..).map(|spare| spare.worker).collect();
        closed
    }

    pub(crate) fn shut_down_error(&self) -> Error {
        Error::new(
            ErrorClass::Unavailable,
            ErrorCode::Lua,
            format!("`{}` was shut down", self.name),
        )
        .with_help("start a new pool or plugin host")
    }

    pub(crate) fn cancelled_error(&self) -> Error {
        Error::new(
            ErrorClass::Cancelled,
            ErrorCode::ResourceLimit,
            format!("`{}` was cancelled", self.name),
        )
        .with_worker_ended(false)
        .with_context("its cancellation token fired; no further call is accepted")
    }

    fn quarantine_error(&self, now: Instant) -> Error {
        let mut error = Error::new(
            ErrorClass::Quarantined,
            ErrorCode::Lua,
            format!("`{}` is quarantined", self.name),
        );
        if let Some(quarantine) = &self.quarantine {
            let window = match self.budget.window() {
                Some(window) => format!("within {} s", window.as_secs_f64()),
                None => "in its lifetime".to_owned(),
            };
            error = error
                .with_context(format!(
                    "{} worker failures {window} exceeded the restart budget of {}; quarantined {} ms ago",
                    quarantine.failures,
                    self.budget.max_restarts(),
                    now.saturating_duration_since(quarantine.since).as_millis()
                ))
                .with_context(format!("last failure: {}", quarantine.cause));
        }
        error.with_help(
            "fix the cause, reload the plugin if needed, then reset to lift the quarantine",
        )
    }

    fn overloaded(&self, why: String) -> Error {
        Error::new(
            ErrorClass::Overloaded,
            ErrorCode::ResourceLimit,
            format!("`{}` is overloaded", self.name),
        )
        .with_context(why)
        .with_context(format!(
            "pool size {}, queue capacity {}",
            self.members.len(),
            self.options.queue_capacity()
        ))
        .with_help("retry later, or raise the pool size or queue capacity")
    }
}

/// What [`PoolCore::close`] handed over.
pub(crate) struct Closed<W> {
    /// The first close of the pool.
    pub(crate) first: bool,
    /// Idle workers (and replacements pending for busy members).
    pub(crate) idle: Vec<W>,
    /// Warm spares.
    pub(crate) spares: Vec<W>,
    /// Members whose call still holds them.
    pub(crate) busy: usize,
}

#[cfg(test)]
pub(crate) mod tests;
