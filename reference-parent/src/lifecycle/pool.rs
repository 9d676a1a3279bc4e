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
//! A pool configured with warm spares (SPEC §17.7) owns one thread, the
//! *keeper*: it starts spares off the callers' path, checks whether a
//! worker swapped out after a tripped limit retired, and exits when the
//! pool shuts down ([`Core::shutdown`] joins it). [`Shared::shutdown`] also
//! starts scoped threads to retire idle workers in parallel, joined before
//! it returns.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quirl_lua_protocol::records::{ErrorCode, PluginRegistrations};

use crate::error::{Error, ErrorClass};
use crate::process_host::Cancel;
use crate::worker::{PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, Worker, WorkerConfig};

use super::budget::{RestartBudget, Verdict};
use super::manifest::PoolOptions;
use super::stats::{Counters, Latency, LatencyRing, MemberState, MemberStats, PoolStats};

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

/// What a shutdown did ([`PluginHost::shutdown`](super::PluginHost::shutdown), [`WorkerPool::shutdown`](super::WorkerPool::shutdown)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Idle workers closed (input closed, exit awaited, group killed, reaped).
    pub retired: usize,
    /// Busy members whose request was cancelled (their workers were killed
    /// and reaped by the calls that held them).
    pub cancelled: usize,
    /// Busy members that had not come back when the bound passed. Their
    /// callers still hold them; each worker is killed and reaped when its
    /// call returns.
    pub still_busy: usize,
    /// Workers that did not exit cleanly by themselves, and other cleanup
    /// problems, one sentence each.
    pub problems: Vec<String>,
    /// Warm spares (and workers waiting for the retirement check) closed.
    pub spares_retired: usize,
    /// How long shutdown took.
    pub elapsed: Duration,
}

impl ShutdownReport {
    /// Whether every worker was accounted for in time without problems.
    pub fn is_clean(&self) -> bool {
        self.still_busy == 0 && self.problems.is_empty()
    }
}

/// How long the keeper waits for a worker swapped out after a tripped limit
/// to exit (a retirement, SPEC §15.8) before deciding it kept serving.
const RETIREMENT_CHECK: Duration = Duration::from_millis(200);

/// How long after a spare was taken the keeper waits before checking the
/// worker it replaced and starting the next spare, so that neither (a
/// reap; a fork, an exec and a VM build) competes for the CPU with the
/// call the spare was taken for.
const SPARE_RESTART_DELAY: Duration = Duration::from_millis(20);

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
    /// reset (SPEC §17.7).
    spares_paused: bool,
    /// Workers swapped out after answering with a tripped limit, waiting
    /// for the keeper to check whether they retired.
    suspects: Vec<Suspect>,
    spare_counters: SpareCounters,
    /// No spare start before this instant (see [`SPARE_RESTART_DELAY`]).
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

    /// Shut the pool down ([`Shared::shutdown_members`]) and join the
    /// keeper, which reaps any spare it was starting.
    pub(crate) fn shutdown(&self, bound: Duration) -> ShutdownReport {
        let mut report = self.shared.shutdown_members(bound);
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
                .push(format!("{}: the spare keeper thread panicked", self.name));
        }
        report
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

    /// Dispatch one call to an idle member and run `f` on its worker,
    /// starting a fresh worker first if the member has none.
    ///
    /// `f` runs a second time, on a fresh worker of the same member, in one
    /// case only: the first run found the worker already gone because it
    /// retired its VM after answering its previous request with an error
    /// (the reference worker does after a tripped budget). The parent
    /// reports that as [`ErrorClass::Unavailable`] before the new request
    /// could run, so nothing ran twice. The retirement counts as a failure
    /// against the restart budget; if it spends the budget, the call fails
    /// with the quarantine error instead.
    pub(crate) fn call<T>(
        &self,
        mut f: impl FnMut(&mut Worker, &Generation) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let checkout = self.checkout()?;
        let started = Instant::now();
        let index = checkout.index;
        let generation = checkout.generation;
        let mut worker = match checkout.worker {
            Some(worker) => worker,
            None => self.replace(index, &generation, started)?,
        };
        let mut result = f(&mut worker, &generation);
        if worker.is_poisoned()
            && result
                .as_ref()
                .is_err_and(|error| error.class() == ErrorClass::Unavailable)
        {
            drop(worker);
            self.retired(index, started)?;
            worker = self.replace(index, &generation, started)?;
            result = f(&mut worker, &generation);
        }
        let elapsed = started.elapsed();
        let alive = !worker.is_poisoned();
        let outcome = match &result {
            Ok(_) if !alive => Err(Error::new(
                ErrorClass::WorkerCrashed,
                ErrorCode::Lua,
                "the Lua worker failed during the call",
            )),
            Ok(_) => Ok(()),
            Err(error) => Err(error.clone()),
        };
        let retired = self.checkin(
            index,
            alive.then_some(worker),
            outcome.as_ref().map(|_| ()),
            elapsed,
        );
        // Killed and reaped here, outside the lock (a poisoned worker was
        // already reaped by the handle itself).
        drop(retired);
        result
    }

    /// Account for the busy member `index`'s worker having retired its VM
    /// after its previous answer: a failure (its budget tripped), followed
    /// by a restart unless that spends the budget. On refusal the member is
    /// put back and the error returned.
    fn retired(&self, index: usize, started: Instant) -> Result<(), Error> {
        let now = Instant::now();
        let mut retire = Vec::new();
        let mut state = self.lock();
        let refusal = if state.closing {
            Some(self.shut_down_error())
        } else if self.shutdown_token.is_cancelled() {
            Some(self.cancelled_error())
        } else if state.quarantine.is_some() {
            // Another member spent the budget meanwhile.
            Some(self.quarantine_error(&state))
        } else {
            None
        };
        state.members[index].counters.retirements += 1;
        let refusal = match refusal {
            Some(error) => Some(error),
            None if state.budget.record_failure(now) == Verdict::Quarantine => {
                let failures = state.budget.failures_in_window(now);
                state.enter_quarantine(
                    now,
                    failures,
                    "the worker retired its VM after a tripped budget".to_owned(),
                    &mut retire,
                );
                Some(self.quarantine_error(&state))
            }
            None => {
                state.members[index].counters.restarts += 1;
                None
            }
        };
        let result = match refusal {
            None => Ok(()),
            Some(error) => {
                let member = &mut state.members[index];
                member.latency.record(started.elapsed());
                retire.extend(member.pending.take());
                member.slot = Slot::Vacant {
                    after_failure: true,
                };
                member.last_error = Some((error.code(), error.class().as_str()));
                state.last_error = member.last_error;
                Err(error)
            }
        };
        drop(state);
        self.changed.notify_all();
        drop(retire);
        result
    }

    /// Start a fresh worker of `generation` for the busy member `index`;
    /// on failure, put the member back and return the error.
    fn replace(
        &self,
        index: usize,
        generation: &Generation,
        started: Instant,
    ) -> Result<Worker, Error> {
        let spare = {
            let mut state = self.lock();
            let spare = state.take_spare(generation.number);
            if let Some(worker) = &spare {
                let member = &mut state.members[index];
                member.pid = Some(worker.pid());
                member.generation = generation.number;
            }
            spare
        };
        if let Some(worker) = spare {
            // The keeper starts the next spare, off this caller's path.
            self.keeper_wake.notify_one();
            return Ok(worker);
        }
        match start_worker(&self.config, &self.shutdown_token, generation) {
            Ok(worker) => {
                let mut state = self.lock();
                let member = &mut state.members[index];
                member.pid = Some(worker.pid());
                member.generation = generation.number;
                if state.spares_paused && self.options.spare_count() > 0 {
                    // A restart on the caller's path worked: try spares again.
                    state.spares_paused = false;
                    self.keeper_wake.notify_one();
                }
                Ok(worker)
            }
            Err(error) => {
                let error = error.with_context(format!(
                    "{}: could not start a replacement worker for member {index}",
                    self.name
                ));
                let retired = self.checkin(index, None, Err(&error), started.elapsed());
                drop(retired);
                Err(error)
            }
        }
    }

    /// Take an idle member out of the pool, waiting in the queue if needed.
    fn checkout(&self) -> Result<Checkout, Error> {
        let mut state = self.lock();
        let deadline = Instant::now() + self.options.waiting_timeout();
        let mut ticket: Option<u64> = None;
        loop {
            let cancelled = self.shutdown_token.is_cancelled();
            if state.closing || state.quarantine.is_some() || cancelled {
                state.leave_queue(ticket);
                state.rejected += 1;
                self.changed.notify_all();
                return Err(if state.closing {
                    self.shut_down_error()
                } else if state.quarantine.is_some() {
                    self.quarantine_error(&state)
                } else {
                    self.cancelled_error()
                });
            }
            let my_turn = match ticket {
                None => state.queue.is_empty(),
                Some(ticket) => state.queue.front() == Some(&ticket),
            };
            if my_turn && let Some(index) = state.pick_idle() {
                if ticket.is_some() {
                    state.queue.pop_front();
                    if !state.queue.is_empty() {
                        // The next in line may find another idle member.
                        self.changed.notify_all();
                    }
                }
                return Ok(state.take(index));
            }
            if ticket.is_none() {
                if state.queue.len() >= self.options.waiting_capacity() {
                    state.rejected += 1;
                    return Err(self.overloaded(
                        &state,
                        format!(
                            "all {} members are busy and the queue is full ({} waiting)",
                            state.members.len(),
                            state.queue.len()
                        ),
                    ));
                }
                let new = state.next_ticket;
                state.next_ticket += 1;
                state.queue.push_back(new);
                ticket = Some(new);
            }
            let now = Instant::now();
            if now >= deadline {
                state.leave_queue(ticket);
                state.rejected += 1;
                self.changed.notify_all();
                return Err(self.overloaded(
                    &state,
                    format!(
                        "no member became idle within {} ms",
                        self.options.waiting_timeout().as_millis()
                    ),
                ));
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Put a member back after a call; returns workers to retire (to be
    /// dropped outside the lock).
    fn checkin(
        &self,
        index: usize,
        worker: Option<Worker>,
        outcome: Result<(), &Error>,
        elapsed: Duration,
    ) -> Vec<Worker> {
        let now = Instant::now();
        let mut retire = Vec::new();
        let mut state = self.lock();
        let member = &mut state.members[index];
        member.latency.record(elapsed);
        member.counters.count(&outcome);
        let last_error = outcome
            .err()
            .map(|error| (error.code(), error.class().as_str()));
        if last_error.is_some() {
            member.last_error = last_error;
        }
        match worker {
            Some(worker) => self.checkin_live(&mut state, index, worker, &outcome, &mut retire),
            None => checkin_lost(&mut state, index, &outcome, now, &mut retire),
        }
        if last_error.is_some() {
            state.last_error = last_error;
        }
        // Only queued callers and a shutdown waiting for busy members wait
        // on `changed`; an uncontended call makes no wake-up system call.
        let waiters = !state.queue.is_empty() || state.closing;
        drop(state);
        if waiters {
            self.changed.notify_all();
        }
        retire
    }

    /// A call gave its worker back: the member idles again, hands over to a
    /// pending replacement, or retires it (closing, quarantined, an old
    /// generation). After a tripped limit the slot takes a warm spare and
    /// the keeper checks the old worker (SPEC §15.8, §17.7).
    fn checkin_live(
        &self,
        state: &mut State,
        index: usize,
        worker: Worker,
        outcome: &Result<(), &Error>,
        retire: &mut Vec<Worker>,
    ) {
        let current = state.generation.number;
        let closing = state.closing;
        let quarantined = state.quarantine.is_some();
        let member = &mut state.members[index];
        if closing || quarantined {
            retire.push(worker);
            retire.extend(member.pending.take());
            member.slot = Slot::Vacant {
                after_failure: false,
            };
        } else if let Some(fresh) = member.pending.take() {
            retire.push(worker);
            member.pid = Some(fresh.pid());
            member.generation = current;
            member.slot = Slot::Idle(Box::new(fresh));
        } else if member.generation == current {
            member.slot = Slot::Idle(Box::new(worker));
            if tripped_limit(outcome)
                && let Some(spare) = state.take_spare(current)
            {
                // The worker may retire after this answer (SPEC
                // §15.8): its slot takes the spare now, and the
                // keeper checks the old worker off this path.
                let member = &mut state.members[index];
                member.pid = Some(spare.pid());
                if let Slot::Idle(old) =
                    std::mem::replace(&mut member.slot, Slot::Idle(Box::new(spare)))
                {
                    state.suspects.push(Suspect {
                        index,
                        worker: *old,
                    });
                }
                self.keeper_wake.notify_one();
            }
        } else {
            retire.push(worker);
            member.slot = Slot::Vacant {
                after_failure: false,
            };
        }
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

    /// Lift the quarantine and forget every failure. Returns whether the
    /// pool was quarantined.
    pub(crate) fn reset(&self) -> bool {
        let mut state = self.lock();
        let was = state.quarantine.take().is_some();
        state.budget.clear();
        for member in &mut state.members {
            if let Slot::Vacant { after_failure } = &mut member.slot {
                *after_failure = false;
            }
        }
        state.spares_paused = false;
        drop(state);
        self.changed.notify_all();
        self.keeper_wake.notify_one();
        was
    }

    pub(crate) fn is_quarantined(&self) -> bool {
        self.lock().quarantine.is_some()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let now = Instant::now();
        let state = self.lock();
        let quarantined = state.quarantine.is_some();
        let mut totals = Counters::default();
        let mut all_samples = Vec::new();
        let members: Vec<MemberStats> = state
            .members
            .iter()
            .enumerate()
            .map(|(index, member)| {
                totals.add(&member.counters);
                all_samples.extend_from_slice(member.latency.samples());
                let (state, running) = match member.slot {
                    Slot::Idle(_) if quarantined => (MemberState::Quarantined, true),
                    Slot::Idle(_) => (MemberState::Idle, true),
                    Slot::Busy => (MemberState::Busy, true),
                    Slot::Vacant { .. } if quarantined => (MemberState::Quarantined, false),
                    Slot::Vacant { .. } => (MemberState::Vacant, false),
                };
                MemberStats {
                    index,
                    generation: member.generation,
                    pid: member.pid,
                    running,
                    state,
                    quarantined,
                    counters: member.counters,
                    last_error_code: member.last_error.map(|(code, _)| code),
                    last_error_kind: member.last_error.map(|(_, kind)| kind),
                    latency: Latency::of(member.latency.samples().to_vec()),
                }
            })
            .collect();
        PoolStats {
            name: self.name.clone(),
            generation: state.generation.number,
            pool_size: members.len(),
            running: members.iter().filter(|m| m.running).count(),
            busy: members
                .iter()
                .filter(|m| m.state == MemberState::Busy)
                .count(),
            quarantined,
            max_restarts: state.budget.max_restarts(),
            restart_window_ms: state
                .budget
                .window()
                .map(|window| u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
            failures_in_window: state.budget.failures_in_window(now),
            queued: state.queue.len(),
            queue_capacity: self.options.waiting_capacity(),
            rejected: state.rejected,
            totals,
            last_error_code: state.last_error.map(|(code, _)| code),
            last_error_kind: state.last_error.map(|(_, kind)| kind),
            latency: Latency::of(all_samples),
            spares: state.spares.len(),
            spare_capacity: self.options.spare_count(),
            spare_pids: state
                .spares
                .iter()
                .map(|spare| spare.worker.pid())
                .collect(),
            spares_started: state.spare_counters.started,
            spares_used: state.spare_counters.used,
            spare_failures: state.spare_counters.failures,
            spares_paused: state.spares_paused,
            members,
            containment: crate::cgroup::containment_report(self.config.configured_containment()),
        }
    }

    /// Refuse new calls, cancel the busy ones, close idle workers, and wait
    /// up to `bound` for busy members to come back.
    ///
    /// Idle workers get their input closed and [`SHUTDOWN_GRACE`] to exit
    /// by themselves when `bound` leaves room for it, and are killed
    /// otherwise; either way they are reaped before this returns. Returns
    /// within about `bound` (plus [`PIPE_RELEASE_WAIT`] if a killed worker's
    /// pipe is held by an escaped process). Idempotent.
    pub(crate) fn shutdown_members(&self, bound: Duration) -> ShutdownReport {
        let started = Instant::now();
        let deadline = started + bound;
        let mut report = ShutdownReport::default();
        let mut idle = Vec::new();
        let suspects_and_spares;
        {
            let mut state = self.lock();
            let first = !state.closing;
            state.closing = true;
            self.shutdown_token.cancel();
            for member in &mut state.members {
                idle.extend(member.pending.take());
                match std::mem::replace(
                    &mut member.slot,
                    Slot::Vacant {
                        after_failure: false,
                    },
                ) {
                    Slot::Idle(worker) => idle.push(*worker),
                    Slot::Busy => {
                        member.slot = Slot::Busy;
                        if first {
                            report.cancelled += 1;
                        }
                    }
                    vacant @ Slot::Vacant { .. } => member.slot = vacant,
                }
            }
            let spares = state.take_spares_and_suspects();
            report.spares_retired = spares.len();
            suspects_and_spares = spares;
        }
        self.changed.notify_all();
        self.keeper_wake.notify_all();
        report.retired = idle.len();
        idle.extend(suspects_and_spares);
        report.problems = retire_all(idle, deadline);
        let mut state = self.lock();
        loop {
            let busy = state
                .members
                .iter()
                .filter(|member| matches!(member.slot, Slot::Busy))
                .count();
            let now = Instant::now();
            if busy == 0 || now >= deadline {
                report.still_busy = busy;
                break;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        if report.still_busy > 0 {
            report.problems.push(format!(
                "{}: {} busy member(s) did not return within {} ms; each worker is killed and reaped when its call returns",
                self.name,
                report.still_busy,
                bound.as_millis()
            ));
        }
        report.elapsed = started.elapsed();
        report
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

impl State {
    /// Every spare and every swapped-out worker still being checked,
    /// taken out of the pool to be closed.
    fn take_spares_and_suspects(&mut self) -> Vec<Worker> {
        std::mem::take(&mut self.spares)
            .into_iter()
            .map(|spare| spare.worker)
            .chain(
                std::mem::take(&mut self.suspects)
                    .into_iter()
                    .map(|suspect| suspect.worker),
            )
            .collect()
    }

    /// Take a ready spare of generation `number`, if any.
    fn take_spare(&mut self, number: u64) -> Option<Worker> {
        let position = self
            .spares
            .iter()
            .position(|spare| spare.generation == number)?;
        self.spare_counters.used += 1;
        self.spares_not_before = Some(Instant::now() + SPARE_RESTART_DELAY);
        Some(self.spares.swap_remove(position).worker)
    }

    /// Whether the keeper should start a spare now.
    fn wants_spare(&self, target: usize) -> bool {
        !self.closing
            && self.quarantine.is_none()
            && !self.spares_paused
            && !self.spare_starting
            && self.spares.len() < target
    }

    /// Round-robin among members that are not busy, starting at the cursor.
    fn pick_idle(&mut self) -> Option<usize> {
        let count = self.members.len();
        let index = (0..count)
            .map(|offset| (self.cursor + offset) % count)
            .find(|&index| !matches!(self.members[index].slot, Slot::Busy))?;
        self.cursor = (index + 1) % count;
        Some(index)
    }

    fn take(&mut self, index: usize) -> Checkout {
        let generation = Arc::clone(&self.generation);
        let member = &mut self.members[index];
        member.counters.invocations += 1;
        let worker = match std::mem::replace(&mut member.slot, Slot::Busy) {
            Slot::Idle(worker) => Some(*worker),
            Slot::Vacant { after_failure } => {
                if after_failure {
                    member.counters.restarts += 1;
                }
                None
            }
            Slot::Busy => None,
        };
        Checkout {
            index,
            worker,
            generation,
        }
    }

    fn leave_queue(&mut self, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            self.queue.retain(|waiting| *waiting != ticket);
        }
    }

    fn enter_quarantine(
        &mut self,
        now: Instant,
        failures: usize,
        cause: String,
        retire: &mut Vec<Worker>,
    ) {
        self.quarantine = Some(Quarantine {
            since: now,
            failures,
            cause,
        });
        retire.extend(self.spares.drain(..).map(|spare| spare.worker));
        for member in &mut self.members {
            retire.extend(member.pending.take());
            if matches!(member.slot, Slot::Idle(_))
                && let Slot::Idle(worker) = std::mem::replace(
                    &mut member.slot,
                    Slot::Vacant {
                        after_failure: false,
                    },
                )
            {
                retire.push(*worker);
            }
        }
    }
}

/// Whether a call's outcome is an answer after which the worker may retire
/// its VM: a limit tripped inside the request (SPEC §15.8).
fn tripped_limit(outcome: &Result<(), &Error>) -> bool {
    outcome.as_ref().err().is_some_and(|error| {
        error.class() == ErrorClass::Guest && error.code() == ErrorCode::ResourceLimit
    })
}

/// What the keeper does next.
enum Chore {
    Check(Box<Suspect>),
    Start(Arc<Generation>),
}

impl Shared {
    /// The keeper thread: start spares and check swapped-out workers until
    /// the pool closes. Anything it holds when the pool closes is killed
    /// and reaped before it returns.
    fn keep(&self) {
        let target = self.options.spare_count();
        loop {
            let chore = {
                let mut state = self.lock();
                loop {
                    if state.closing {
                        break None;
                    }
                    if self.shutdown_token.is_cancelled() {
                        // Every call fails now; close what the keeper
                        // holds and stop (shutdown still joins it).
                        let spares = state.take_spares_and_suspects();
                        drop(state);
                        drop(spares);
                        return;
                    }
                    let work = !state.suspects.is_empty() || state.wants_spare(target);
                    let now = Instant::now();
                    if work && let Some(at) = state.spares_not_before.filter(|at| *at > now) {
                        // A spare was just taken: leave the CPU to the call
                        // it was taken for.
                        state = self
                            .keeper_wake
                            .wait_timeout(state, at - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                        continue;
                    }
                    if let Some(suspect) = state.suspects.pop() {
                        break Some(Chore::Check(Box::new(suspect)));
                    }
                    if work {
                        state.spares_not_before = None;
                        state.spare_starting = true;
                        break Some(Chore::Start(Arc::clone(&state.generation)));
                    }
                    state = self
                        .keeper_wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            match chore {
                None => return,
                Some(Chore::Check(suspect)) => self.check_retirement(*suspect),
                Some(Chore::Start(generation)) => self.start_spare(&generation),
            }
        }
    }

    /// Start one spare of `generation`. A failure (other than a
    /// cancellation) counts against the restart budget like a failed
    /// restart and pauses spares (SPEC §17.7).
    fn start_spare(&self, generation: &Generation) {
        // One `eval "return nil"` warms the spare (its first request pays
        // for page faults and a compile); it changes no global.
        let started =
            start_worker(&self.config, &self.shutdown_token, generation).and_then(|mut worker| {
                worker.eval("return nil")?;
                Ok(worker)
            });
        let now = Instant::now();
        let mut retire = Vec::new();
        let mut state = self.lock();
        state.spare_starting = false;
        match started {
            Ok(worker) => {
                if state.closing
                    || state.quarantine.is_some()
                    || state.generation.number != generation.number
                {
                    retire.push(worker);
                } else {
                    state.spare_counters.started += 1;
                    state.spares.push(Spare {
                        generation: generation.number,
                        worker,
                    });
                }
            }
            Err(error) => {
                let cancelled = error.class() == ErrorClass::Cancelled
                    || state.closing
                    || self.shutdown_token.is_cancelled();
                if !cancelled && state.quarantine.is_none() {
                    let error =
                        error.with_context(format!("{}: could not start a warm spare", self.name));
                    state.spare_counters.failures += 1;
                    state.spares_paused = true;
                    state.last_error = Some((error.code(), error.class().as_str()));
                    if state.budget.record_failure(now) == Verdict::Quarantine {
                        let failures = state.budget.failures_in_window(now);
                        state.enter_quarantine(now, failures, error.to_string(), &mut retire);
                    }
                }
            }
        }
        drop(state);
        self.changed.notify_all();
        drop(retire);
    }

    /// A worker was swapped out after answering with a tripped limit: if it
    /// exits within [`RETIREMENT_CHECK`], it retired its VM — a failure and
    /// a restart of its member, as if the next call had found it gone.
    /// Otherwise it kept its session (a worker may, SPEC §15.8) and is
    /// killed and reaped, which is no failure: its member already serves on
    /// the spare.
    fn check_retirement(&self, suspect: Suspect) {
        let Suspect { index, worker } = suspect;
        let retired = worker.wait_for_exit(Instant::now() + RETIREMENT_CHECK);
        // Reaped (or, if it kept serving, killed and reaped) here.
        drop(worker);
        let now = Instant::now();
        let mut retire = Vec::new();
        let mut state = self.lock();
        if retired && !state.closing {
            state.members[index].counters.retirements += 1;
            if state.quarantine.is_none() {
                if state.budget.record_failure(now) == Verdict::Quarantine {
                    let failures = state.budget.failures_in_window(now);
                    state.enter_quarantine(
                        now,
                        failures,
                        "the worker retired its VM after a tripped budget".to_owned(),
                        &mut retire,
                    );
                } else {
                    state.members[index].counters.restarts += 1;
                }
            }
        }
        drop(state);
        self.changed.notify_all();
        drop(retire);
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
        .map(|error| format!("worker {pid}: {error}"))
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

/// A call lost its worker (it crashed, was killed or timed out): the member
/// takes a pending replacement or becomes vacant, and the failure counts
/// against the restart budget unless the caller cancelled (SPEC §17.7).
fn checkin_lost(
    state: &mut State,
    index: usize,
    outcome: &Result<(), &Error>,
    now: Instant,
    retire: &mut Vec<Worker>,
) {
    let current = state.generation.number;
    let closing = state.closing;
    let quarantined = state.quarantine.is_some();
    let member = &mut state.members[index];
    member.slot = match member.pending.take() {
        Some(fresh) if !closing && !quarantined => {
            member.pid = Some(fresh.pid());
            member.generation = current;
            Slot::Idle(Box::new(fresh))
        }
        other => {
            retire.extend(other);
            Slot::Vacant {
                after_failure: true,
            }
        }
    };
    let counts = outcome
        .err()
        .is_none_or(|error| error.class() != ErrorClass::Cancelled);
    if counts && !closing && !quarantined && state.budget.record_failure(now) == Verdict::Quarantine
    {
        let failures = state.budget.failures_in_window(now);
        let cause = outcome
            .err()
            .map_or_else(|| "worker failure".to_owned(), ToString::to_string);
        state.enter_quarantine(now, failures, cause, retire);
    }
}
