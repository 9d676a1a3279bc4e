//! Dispatch (DESIGN §17.7): taking an idle member out of the pool (waiting
//! in the bounded queue if none is idle), running a request on its worker
//! (starting a replacement first if it has none, taking a warm spare when
//! one is ready), and putting the member back after the call, counting a
//! lost worker against the restart budget.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;

use crate::error::{Error, ErrorClass};
use crate::worker::Worker;

use super::super::budget::Verdict;
use super::{Checkout, Generation, Shared, Slot, State, Suspect, start_worker};

impl Shared {
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
            None if state.retirement_failure(index, now, &mut retire) => {
                Some(self.quarantine_error(&state))
            }
            None => None,
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
    /// the keeper checks the old worker (DESIGN §15.8, §17.7).
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
}

impl State {
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
}

/// Whether a call's outcome is an answer after which the worker may retire
/// its VM: a limit tripped inside the request (DESIGN §15.8).
fn tripped_limit(outcome: &Result<(), &Error>) -> bool {
    outcome.as_ref().err().is_some_and(|error| {
        error.class() == ErrorClass::Guest && error.code() == ErrorCode::ResourceLimit
    })
}

/// A call lost its worker (it crashed, was killed or timed out): the member
/// takes a pending replacement or becomes vacant, and the failure counts
/// against the restart budget unless the caller cancelled (DESIGN §17.7).
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
