//! Dispatch (DESIGN §17.7): taking an idle member out of the pool (or a
//! place in the bounded queue), and putting it back after the call with
//! its outcome counted, the restart budget kept, and a worker that ended
//! replaced by a warm spare when one is ready.

use std::sync::Arc;
use std::time::Instant;

use quirl_lua_protocol::ErrorContext;

use quirl_lua_protocol::records::ErrorCode;

use super::super::budget::Verdict;
use super::{Generation, PoolCore, PoolWorker, Quarantine, Slot};
use crate::error::{Error, ErrorClass};

/// What a caller got from [`PoolCore::checkout`].
pub(crate) enum Dispatch<W> {
    /// A member: run the call on its worker (starting one first if the
    /// lease has none), then [`PoolCore::checkin`].
    Run(Lease<W>),
    /// Every member is busy: the caller holds this queue ticket; it waits
    /// for a change (a checkin, a close, a quarantine) and asks again.
    Queued(u64),
    /// The call is refused (shut down, quarantined, cancelled, overloaded)
    /// without touching a worker.
    Refused(Error),
}

/// A member taken out of the pool for one call.
pub(crate) struct Lease<W> {
    pub(crate) index: usize,
    /// `None`: the member has no worker; the caller starts one of
    /// `generation` (see `restart`) and reports it with
    /// [`PoolCore::started`] or [`PoolCore::start_failed`].
    pub(crate) worker: Option<W>,
    pub(crate) generation: Arc<Generation>,
    /// The start the caller makes for a lease without a worker replaces
    /// one that ended (a restart).
    pub(crate) restart: bool,
    pub(crate) dispatched: Instant,
    /// The worker's own counts when it was leased (see [`PoolWorker`]).
    baseline: Baseline,
}

#[derive(Clone, Copy, Default)]
struct Baseline {
    restarts: u64,
    found_dead: u64,
    found_retired: u64,
}

impl Baseline {
    fn of(worker: &impl PoolWorker) -> Self {
        Self {
            restarts: worker.restarts(),
            found_dead: worker.found_dead(),
            found_retired: worker.found_retired(),
        }
    }
}

impl<W: PoolWorker> PoolCore<W> {
    /// Dispatch one call: an idle member (round-robin among members not
    /// busy), a queue ticket when all are busy, or a refusal. A caller
    /// that holds `ticket` asks again with it after a wake-up; it is
    /// served in turn, and refused as overloaded once `queue_deadline`
    /// passes. `cancelled`: the pool's token fired.
    pub(crate) fn checkout(
        &mut self,
        ticket: Option<u64>,
        cancelled: bool,
        now: Instant,
        queue_deadline: Instant,
    ) -> Dispatch<W> {
        if self.closing || self.quarantine.is_some() || cancelled {
            self.leave_queue(ticket);
            self.rejected += 1;
            return Dispatch::Refused(if self.closing {
                self.shut_down_error()
            } else if self.quarantine.is_some() {
                self.quarantine_error(now)
            } else {
                self.cancelled_error()
            });
        }
        let my_turn = match ticket {
            None => self.queue.is_empty(),
            Some(ticket) => self.queue.front() == Some(&ticket),
        };
        if my_turn && let Some(index) = self.pick_idle() {
            if ticket.is_some() {
                self.queue.pop_front();
            }
            return Dispatch::Run(self.take(index, now));
        }
        let ticket = match ticket {
            Some(ticket) => ticket,
            None => {
                if self.queue.len() >= self.options.queue_capacity() {
                    self.rejected += 1;
                    return Dispatch::Refused(self.overloaded(format!(
                        "all {} members are busy and the queue is full ({} waiting)",
                        self.members.len(),
                        self.queue.len()
                    )));
                }
                let new = self.next_ticket;
                self.next_ticket += 1;
                self.queue.push_back(new);
                new
            }
        };
        if now >= queue_deadline {
            self.leave_queue(Some(ticket));
            self.rejected += 1;
            return Dispatch::Refused(self.overloaded(format!(
                "no member became idle within {} ms",
                self.options.queue_timeout().as_millis()
            )));
        }
        Dispatch::Queued(ticket)
    }

    /// A waiting caller gives up its place (its future was dropped).
    pub(crate) fn leave_queue(&mut self, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            self.queue.retain(|waiting| *waiting != ticket);
        }
    }

    /// The caller started a worker for `lease` (which had none).
    pub(crate) fn started(&mut self, lease: &mut Lease<W>, worker: &W) {
        let member = &mut self.members[lease.index];
        member.pid = Some(worker.pid());
        member.generation = lease.generation.number;
        if lease.restart {
            member.counters.restarts += 1;
        }
        lease.baseline = Baseline::of(worker);
        if self.spares_paused && self.options.spares() > 0 {
            // A start on the caller's path worked: try spares again.
            self.spares_paused = false;
        }
    }

    /// The caller could not start a worker for `lease`: the call's
    /// outcome is that failure (a spawn failure against the budget, or a
    /// cancellation). Returns workers to drop.
    pub(crate) fn start_failed(&mut self, lease: Lease<W>, error: &Error, now: Instant) -> Vec<W> {
        let mut retire = Vec::new();
        let index = lease.index;
        self.record_outcome(index, &lease, Err(error), now, &mut retire);
        let member = &mut self.members[index];
        retire.extend(member.pending.take());
        member.slot = Slot::Vacant {
            after_failure: lease.restart || error.class().is_worker_failure(),
        };
        retire
    }

    /// The caller dropped its call while it held member `lease.index`: the
    /// worker it held was dropped with the call (killed and reaped). The
    /// call counts as a cancellation; the member starts a fresh worker on
    /// its next call (a restart). Returns workers to drop.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn abandoned(&mut self, lease: Lease<W>, now: Instant) -> Vec<W> {
        let mut retire = Vec::new();
        let index = lease.index;
        let error = abandoned_call(index);
        self.record_outcome(index, &lease, Err(&error), now, &mut retire);
        let member = &mut self.members[index];
        if self.closing || self.quarantine.is_some() {
            retire.extend(member.pending.take());
        } else if let Some(fresh) = member.pending.take() {
            member.pid = Some(fresh.pid());
            member.generation = self.generation.number;
            member.slot = Slot::Idle(fresh);
            return retire;
        }
        member.slot = Slot::Vacant {
            after_failure: true,
        };
        retire
    }

    /// Put a member back after its call with `worker` (whatever state it
    /// is in) and the call's outcome. Returns workers to drop outside the
    /// lock (a worker that ended is already reaped; dropping a live one
    /// kills and reaps it).
    pub(crate) fn checkin(
        &mut self,
        lease: Lease<W>,
        worker: W,
        outcome: Result<(), &Error>,
        now: Instant,
    ) -> Vec<W> {
        let mut retire = Vec::new();
        let index = lease.index;
        // What the worker did by itself during the call: fresh processes
        // it started (the replacement of an ended one, or of one it found
        // dead before sending anything).
        let restarts = worker.restarts().saturating_sub(lease.baseline.restarts);
        let found_dead = worker
            .found_dead()
            .saturating_sub(lease.baseline.found_dead);
        let found_retired = worker
            .found_retired()
            .saturating_sub(lease.baseline.found_retired);
        {
            let counters = &mut self.members[index].counters;
            counters.restarts += restarts;
            counters.found_dead += found_dead;
            counters.retirements += found_retired;
        }
        for _ in 0..found_dead {
            self.record_failure(now, "a worker was found dead between calls", &mut retire);
        }
        if restarts > 0 && self.spares_paused {
            // A start on the caller's path worked: try spares again.
            self.spares_paused = false;
        }
        self.record_outcome(index, &lease, outcome, now, &mut retire);
        let current = self.generation.number;
        let closing = self.closing;
        let quarantined = self.quarantine.is_some();
        let spare = if !closing && !quarantined && worker.has_ended() {
            self.take_spare(current, now)
        } else {
            None
        };
        let member = &mut self.members[index];
        // The worker that served the call (it may have restarted during it)
        // is the member's last, whatever happens to it now.
        member.pid = Some(worker.pid());
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
            member.slot = Slot::Idle(fresh);
        } else if member.generation != current {
            retire.push(worker);
            member.slot = Slot::Vacant {
                after_failure: false,
            };
        } else if let Some(spare) = spare {
            // The worker ended (a failure, or retired after a tripped
            // limit): its slot takes the warm spare at once (DESIGN §17.7).
            retire.push(worker);
            member.pid = Some(spare.pid());
            member.counters.restarts += 1;
            member.slot = Slot::Idle(spare);
        } else {
            // Ended or not, it waits for its next call: one that ended
            // starts a fresh process first (counted then).
            member.slot = Slot::Idle(worker);
        }
        retire
    }

    /// Count one returned call of member `index`: latency, its outcome
    /// counter, the last error, and a failure against the budget.
    fn record_outcome(
        &mut self,
        index: usize,
        lease: &Lease<W>,
        outcome: Result<(), &Error>,
        now: Instant,
        retire: &mut Vec<W>,
    ) {
        let limit_trips_count = self.options.limit_trips_as_failures();
        let member = &mut self.members[index];
        member
            .latency
            .record(now.saturating_duration_since(lease.dispatched));
        member.counters.count(&outcome);
        if let Err(error) = outcome {
            let last = (error.code(), error.class().as_str());
            member.last_error = Some(last);
            self.last_error = Some(last);
            let class = error.class();
            if class.is_worker_failure() || (limit_trips_count && class == ErrorClass::Limit) {
                self.record_failure(now, &error.to_string(), retire);
            }
        }
    }

    /// One worker failure at `now`: quarantine the pool when it spends
    /// the restart budget (not while closing, nor twice).
    pub(super) fn record_failure(&mut self, now: Instant, cause: &str, retire: &mut Vec<W>) {
        if self.closing || self.quarantine.is_some() {
            return;
        }
        if self.budget.record_failure(now) == Verdict::Quarantine {
            let failures = self.budget.failures_in_window(now);
            self.enter_quarantine(now, failures, cause.to_owned(), retire);
        }
    }

    /// Round-robin among members that are not busy, from the cursor.
    fn pick_idle(&mut self) -> Option<usize> {
        let count = self.members.len();
        let index = (0..count)
            .map(|offset| (self.cursor + offset) % count)
            .find(|&index| !matches!(self.members[index].slot, Slot::Busy))?;
        self.cursor = (index + 1) % count;
        Some(index)
    }

    fn take(&mut self, index: usize, now: Instant) -> Lease<W> {
        let generation = Arc::clone(&self.generation);
        let current = generation.number;
        let slot = std::mem::replace(&mut self.members[index].slot, Slot::Busy);
        self.members[index].counters.invocations += 1;
        let (mut worker, mut restart) = match slot {
            Slot::Idle(worker) => (Some(worker), false),
            Slot::Vacant { after_failure } => (None, after_failure),
            Slot::Busy => (None, false),
        };
        // A worker that ended since its last call: a ready spare replaces
        // it, so this caller pays no cold start.
        if worker.as_ref().is_some_and(PoolWorker::has_ended)
            && let Some(spare) = self.take_spare(current, now)
        {
            let member = &mut self.members[index];
            member.pid = Some(spare.pid());
            member.counters.restarts += 1;
            worker = Some(spare);
            restart = false;
        } else if worker.is_none()
            && let Some(spare) = self.take_spare(current, now)
        {
            let member = &mut self.members[index];
            member.pid = Some(spare.pid());
            member.generation = current;
            if restart {
                member.counters.restarts += 1;
            }
            worker = Some(spare);
            restart = false;
        }
        let baseline = worker.as_ref().map(Baseline::of).unwrap_or_default();
        Lease {
            index,
            worker,
            generation,
            restart,
            dispatched: now,
            baseline,
        }
    }

    pub(super) fn enter_quarantine(
        &mut self,
        now: Instant,
        failures: usize,
        cause: String,
        retire: &mut Vec<W>,
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
                retire.push(worker);
            }
        }
    }
}

/// The outcome of a call dropped while it held member `index`.
fn abandoned_call(index: usize) -> Error {
    Error::new(
        ErrorClass::Cancelled,
        ErrorCode::ResourceLimit,
        "the Lua request was cancelled",
    )
    .with_context(format!(
        "the call on member {index} was dropped before it returned; its worker was killed"
    ))
}
