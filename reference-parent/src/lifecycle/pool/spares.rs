//! Warm spares, swapped-out suspects and quarantine (DESIGN §17.7): the
//! keeper thread that starts spares off the callers' path and checks
//! whether a worker swapped out after a tripped limit retired (SPEC
//! §15.8), and entering and lifting the quarantine.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;

use crate::error::ErrorClass;
use crate::worker::Worker;

use super::super::budget::Verdict;
use super::{Generation, Quarantine, Shared, Slot, Spare, State, Suspect, start_worker};

/// How long the keeper waits for a worker swapped out after a tripped limit
/// to exit (a retirement, DESIGN §15.8) before deciding it kept serving.
const RETIREMENT_CHECK: Duration = Duration::from_millis(200);

/// How long after a spare was taken the keeper waits before checking the
/// worker it replaced and starting the next spare, so that neither (a
/// reap; a fork, an exec and a VM build) competes for the CPU with the
/// call the spare was taken for.
pub(super) const SPARE_RESTART_DELAY: Duration = Duration::from_millis(20);

/// What the keeper does next.
enum Chore {
    Check(Box<Suspect>),
    Start(Arc<Generation>),
}

impl Shared {
    /// The keeper thread: start spares and check swapped-out workers until
    /// the pool closes. Anything it holds when the pool closes is killed
    /// and reaped before it returns.
    pub(super) fn keep(&self) {
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
    /// restart and pauses spares (DESIGN §17.7).
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
    /// Otherwise it kept its session (a worker may, DESIGN §15.8) and is
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
                state.retirement_failure(index, now, &mut retire);
            }
        }
        drop(state);
        self.changed.notify_all();
        drop(retire);
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
}

impl State {
    /// Every spare and every swapped-out worker still being checked,
    /// taken out of the pool to be closed.
    pub(super) fn take_spares_and_suspects(&mut self) -> Vec<Worker> {
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
    pub(super) fn take_spare(&mut self, number: u64) -> Option<Worker> {
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

    /// Member `index`'s worker retired its VM after a tripped budget: one
    /// failure of the restart budget. Quarantines the pool when the budget
    /// is spent (`true`); otherwise the member restarts, counted.
    pub(super) fn retirement_failure(
        &mut self,
        index: usize,
        now: Instant,
        retire: &mut Vec<Worker>,
    ) -> bool {
        if self.budget.record_failure(now) == Verdict::Quarantine {
            let failures = self.budget.failures_in_window(now);
            self.enter_quarantine(
                now,
                failures,
                "the worker retired its VM after a tripped budget".to_owned(),
                retire,
            );
            true
        } else {
            self.members[index].counters.restarts += 1;
            false
        }
    }

    pub(super) fn enter_quarantine(
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
