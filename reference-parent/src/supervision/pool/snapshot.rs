//! The pool's [`PoolStats`] snapshot, taken under the driver's lock: every
//! counter of one consistent moment (DESIGN §17.7).

use std::time::Instant;

use super::super::stats::{Counters, Latency, MemberState, MemberStats, PoolStats};
use super::{PoolCore, PoolWorker, Slot};
use crate::cgroup::ContainmentReport;

impl<W: PoolWorker> PoolCore<W> {
    /// A snapshot at `now`; `containment` and `driver` are the driver's.
    pub(crate) fn stats(
        &self,
        now: Instant,
        containment: ContainmentReport,
        driver: &'static str,
    ) -> PoolStats {
        let quarantined = self.quarantine.is_some();
        let mut totals = Counters::default();
        let mut all_samples = Vec::new();
        let members: Vec<MemberStats> = self
            .members
            .iter()
            .enumerate()
            .map(|(index, member)| {
                totals.add(&member.counters);
                all_samples.extend_from_slice(member.latency.samples());
                let (state, running) = match &member.slot {
                    Slot::Idle(worker) if quarantined => {
                        (MemberState::Quarantined, !worker.has_ended())
                    }
                    // Its worker ended: the next call starts a fresh one.
                    Slot::Idle(worker) if worker.has_ended() => (MemberState::Vacant, false),
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
            generation: self.generation.number,
            pool_size: members.len(),
            running: members.iter().filter(|m| m.running).count(),
            busy: members
                .iter()
                .filter(|m| m.state == MemberState::Busy)
                .count(),
            quarantined,
            max_restarts: self.budget.max_restarts(),
            limit_trips_are_failures: self.options.limit_trips_as_failures(),
            restart_window_ms: self
                .budget
                .window()
                .map(|window| u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
            failures_in_window: self.budget.failures_in_window(now),
            queued: self.queue.len(),
            queue_capacity: self.options.queue_capacity(),
            rejected: self.rejected,
            totals,
            last_error_code: self.last_error.map(|(code, _)| code),
            last_error_kind: self.last_error.map(|(_, kind)| kind),
            latency: Latency::of(all_samples),
            spares: self.spares.len(),
            spare_capacity: self.options.spares(),
            spare_pids: self.spares.iter().map(|spare| spare.worker.pid()).collect(),
            spares_started: self.spare_counters.started,
            spares_used: self.spare_counters.used,
            spare_failures: self.spare_counters.failures,
            spares_paused: self.spares_paused,
            members,
            containment,
            driver,
        }
    }
}
