//! The pool's stats (DESIGN §17.7): a [`PoolStats`] snapshot of every
//! member, the queue, the restart budget and the spares, taken under the
//! lock. The stats types themselves live in [`super::super::stats`].

use std::time::Instant;

use super::super::stats::{Counters, Latency, MemberState, MemberStats, PoolStats};
use super::{Shared, Slot};

impl Shared {
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
}
