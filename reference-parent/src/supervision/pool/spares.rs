//! Warm spares and the quarantine's end (DESIGN §17.7): what the keeper
//! (a thread or a task of the driver) does next, what a spare start
//! changes, taking a spare, and [`PoolCore::reset`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;

use super::{Generation, PoolCore, PoolWorker, Slot, Spare};
use crate::error::{Error, ErrorClass};

/// How long after a spare was taken the keeper waits before starting the
/// next one, so that the start (a fork, an exec and a VM build) does not
/// compete for the CPU with the call the spare was taken for.
pub(crate) const SPARE_RESTART_DELAY: Duration = Duration::from_millis(20);

/// What the keeper does next.
pub(crate) enum Chore<W> {
    /// Start one spare of this generation, then report it with
    /// [`PoolCore::spare_started`].
    Start(Arc<Generation>),
    /// Nothing now: wait for a wake-up, or until this instant.
    Wait(Option<Instant>),
    /// The pool is closing (or its token fired): the keeper ends, after
    /// dropping (killing and reaping) the spares it is handed.
    Stop(Vec<W>),
}

impl<W: PoolWorker> PoolCore<W> {
    /// The keeper's next chore at `now`. `cancelled`: the pool's token
    /// fired, so every call fails now and the spares are closed.
    pub(crate) fn keeper_chore(&mut self, cancelled: bool, now: Instant) -> Chore<W> {
        if self.closing {
            return Chore::Stop(Vec::new());
        }
        if cancelled {
            let spares = self.spares.drain(..).map(|spare| spare.worker).collect();
            return Chore::Stop(spares);
        }
        if !self.wants_spare() {
            return Chore::Wait(None);
        }
        if let Some(at) = self.spares_not_before.filter(|at| *at > now) {
            return Chore::Wait(Some(at));
        }
        self.spares_not_before = None;
        self.spare_starting = true;
        Chore::Start(Arc::clone(&self.generation))
    }

    /// The keeper's spare start ended. A start that failed for another
    /// reason than a cancellation (`cancelled`: the pool's token fired or
    /// it is closing) is a failure against the restart budget and pauses
    /// spares until a start on a caller's path succeeds, a reload or a
    /// reset. Returns workers to drop.
    pub(crate) fn spare_started(
        &mut self,
        generation: u64,
        started: Result<W, Error>,
        cancelled: bool,
        now: Instant,
    ) -> Vec<W> {
        self.spare_starting = false;
        let mut retire = Vec::new();
        match started {
            Ok(worker) => {
                if self.closing || self.quarantine.is_some() || self.generation.number != generation
                {
                    retire.push(worker);
                } else {
                    self.spare_counters.started += 1;
                    self.spares.push(Spare { generation, worker });
                }
            }
            Err(error) => {
                let cancelled = cancelled || self.closing || error.class() == ErrorClass::Cancelled;
                if !cancelled && self.quarantine.is_none() {
                    let error =
                        error.with_context(format!("{}: could not start a warm spare", self.name));
                    self.spare_counters.failures += 1;
                    self.spares_paused = true;
                    self.last_error = Some((error.code(), error.class().as_str()));
                    self.record_failure(now, &error.to_string(), &mut retire);
                }
            }
        }
        retire
    }

    /// Take a ready spare of generation `number`, if any.
    pub(super) fn take_spare(&mut self, number: u64, now: Instant) -> Option<W> {
        let position = self
            .spares
            .iter()
            .position(|spare| spare.generation == number)?;
        self.spare_counters.used += 1;
        self.spares_not_before = Some(now + SPARE_RESTART_DELAY);
        Some(self.spares.swap_remove(position).worker)
    }

    /// Whether the keeper should start a spare.
    fn wants_spare(&self) -> bool {
        !self.closing
            && self.quarantine.is_none()
            && !self.spares_paused
            && !self.spare_starting
            && self.spares.len() < self.options.spares()
    }

    /// Lift the quarantine and forget every failure; members start fresh
    /// workers on their next call. Returns whether the pool was
    /// quarantined.
    pub(crate) fn reset(&mut self) -> bool {
        let was = self.quarantine.take().is_some();
        self.budget.clear();
        for member in &mut self.members {
            if let Slot::Vacant { after_failure } = &mut member.slot {
                *after_failure = false;
            }
        }
        self.spares_paused = false;
        was
    }
}
