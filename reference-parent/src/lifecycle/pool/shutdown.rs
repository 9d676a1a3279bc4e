//! Shutdown (DESIGN §17.7): refusing new calls, cancelling busy ones,
//! closing idle workers, spares and suspects in parallel, joining the
//! keeper, and the [`ShutdownReport`] of what was done.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use crate::worker::{PIPE_RELEASE_WAIT, SHUTDOWN_GRACE, Worker};

use super::{Core, Shared, Slot};

/// What a shutdown did ([`PluginHost::shutdown`](super::super::PluginHost::shutdown), [`WorkerPool::shutdown`](super::super::WorkerPool::shutdown)).
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

impl Core {
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
