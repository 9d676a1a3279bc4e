//! Counters and latency samples of pool members, and the serializable
//! snapshots built from them ([`PoolStats`], [`MemberStats`]), for every
//! pool driver alike.
//!
//! A snapshot is plain data taken under the pool's lock; nothing in it
//! refers back to the pool. Latencies are kept as the most recent
//! [`LATENCY_SAMPLES_MAX`] samples per member, so percentiles describe
//! recent behaviour and memory stays bounded however long a pool runs.

use quirl_lua_protocol::records::ErrorCode;
use serde::Serialize;

use crate::error::{Error, ErrorClass};

/// Latency samples kept per member (a ring of the most recent ones).
pub const LATENCY_SAMPLES_MAX: usize = 1024;

/// Statistics of one pool (one plugin, or a pool of plain eval workers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// The plugin's (or pool's) name.
    pub name: String,
    /// Code generation now serving: 1 for the first load, plus one per
    /// successful reload.
    pub generation: u64,
    /// Number of members.
    pub pool_size: usize,
    /// Members with a live worker process (idle or busy).
    pub running: usize,
    /// Members running a request right now.
    pub busy: usize,
    /// Whether the restart budget is spent and every call is refused.
    pub quarantined: bool,
    /// The restart budget (failures tolerated inside the window).
    pub max_restarts: u32,
    /// Whether limit trips count against the restart budget (default
    /// `false`: only worker failures do).
    pub limit_trips_are_failures: bool,
    /// The forgiveness window in milliseconds; `null`: failures are never
    /// forgiven.
    pub restart_window_ms: Option<u64>,
    /// Failures that count against the budget right now.
    pub failures_in_window: usize,
    /// Callers waiting for an idle member.
    pub queued: usize,
    /// Most callers that may wait.
    pub queue_capacity: usize,
    /// Calls refused without reaching a member: quarantined, queue full,
    /// queue wait timed out, or the pool was shut down.
    pub rejected: u64,
    /// Sums over the members.
    #[serde(flatten)]
    pub totals: Counters,
    /// Code of the most recent error of any member (`null` if none yet).
    pub last_error_code: Option<ErrorCode>,
    /// Class of that error (`deadline`, `guest`, `limit`,
    /// `worker_crashed`, …).
    pub last_error_kind: Option<&'static str>,
    /// Percentiles over every member's recent samples.
    pub latency: Latency,
    /// Warm spares ready to take a member's slot (DESIGN §17.7); not
    /// counted in `running`.
    pub spares: usize,
    /// Most spares the pool keeps (0: none).
    pub spare_capacity: usize,
    /// Process ids of the ready spares.
    pub spare_pids: Vec<u32>,
    /// Spares started (by the keeper, off the callers' path).
    pub spares_started: u64,
    /// Spares that took a member's slot.
    pub spares_used: u64,
    /// Spare starts that failed; each counts against the restart budget.
    pub spare_failures: u64,
    /// Whether spare starts are paused after a failure (until a restart on
    /// a caller's path succeeds, a reload, or a reset).
    pub spares_paused: bool,
    /// Per-member detail, in member order.
    pub members: Vec<MemberStats>,
    /// How the pool's workers and their host commands are contained:
    /// `cgroup` or `process-group`, and why (DESIGN §17.2–17.3).
    pub containment: crate::cgroup::ContainmentReport,
    /// Which driver runs the pool: `blocking` or `tokio`.
    pub driver: &'static str,
}

/// Statistics of one pool member (one worker slot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberStats {
    /// Position in the pool, from 0.
    pub index: usize,
    /// Code generation of the member's current (or last) worker.
    pub generation: u64,
    /// Process id of the current (or last) worker; `null` before the first.
    pub pid: Option<u32>,
    /// Whether the member has a live worker process.
    pub running: bool,
    /// `idle`, `busy`, `vacant` (its worker failed or was retired; the next
    /// call starts a fresh one) or `quarantined`.
    pub state: MemberState,
    /// Whether the plugin is quarantined (the same for every member).
    pub quarantined: bool,
    /// This member's counters.
    #[serde(flatten)]
    pub counters: Counters,
    /// Code of the member's most recent error (`null` if none yet).
    pub last_error_code: Option<ErrorCode>,
    /// Class of that error.
    pub last_error_kind: Option<&'static str>,
    /// Percentiles over the member's recent samples.
    pub latency: Latency,
}

/// What a member is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Has a live worker waiting for a call.
    Idle,
    /// Running a call (or starting a replacement worker for one).
    Busy,
    /// Has no worker; the next call dispatched to it starts one.
    Vacant,
    /// Has no worker and gets no calls until the pool is reset.
    Quarantined,
}

/// Event counters (DESIGN §17.7).
///
/// Every call dispatched to a member counts once in `invocations` and,
/// when it returns, once in exactly one outcome counter: `successes`,
/// `guest_errors`, `limit_trips`, `timeouts`, `crashes`, `violations`,
/// `cancellations` or `spawn_failures`. So at any snapshot
/// `invocations` is their sum plus the members busy with a call. The
/// worker failures the restart budget governs are `timeouts`, `crashes`,
/// `violations`, `spawn_failures` and `found_dead`; `limit_trips` only
/// with [`PoolOptions::with_limit_trips_as_failures`](crate::lifecycle::PoolOptions::with_limit_trips_as_failures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Calls dispatched to the member.
    pub invocations: u64,
    /// Calls that returned a result.
    pub successes: u64,
    /// Guest errors (a Lua error, a denied grant, …) and requests refused
    /// before they were sent; the worker stayed in use.
    pub guest_errors: u64,
    /// Calls whose guest tripped a limit inside the worker (instructions,
    /// memory, its own wall time, host calls): the worker answered and was
    /// retired by design, and the member's next call runs on a fresh one.
    /// Not a worker failure.
    pub limit_trips: u64,
    /// Requests killed at their deadline.
    pub timeouts: u64,
    /// Workers that died, exited or closed their stream mid-request.
    pub crashes: u64,
    /// Workers killed for a protocol violation.
    pub violations: u64,
    /// Requests cancelled by the host (its token, a dropped call, a
    /// shutdown); not counted against the restart budget.
    pub cancellations: u64,
    /// Workers that could not be started, initialized or loaded with the
    /// plugin for a call.
    pub spawn_failures: u64,
    /// Workers found dead when a call reached them (they died between
    /// calls); each is a failure, and the call ran on a fresh worker.
    pub found_dead: u64,
    /// Fresh workers that replaced one that ended (a spare taken, or a
    /// start on the caller's path).
    pub restarts: u64,
    /// Workers retired after a tripped limit (their VM is never reused):
    /// by the parent after a `limit` answer, or found retired by
    /// themselves (SPEC §13.1-a). Not a failure.
    pub retirements: u64,
}

impl Counters {
    /// Count the outcome of one call.
    pub(crate) fn count(&mut self, outcome: &Result<(), &Error>) {
        match outcome {
            Ok(()) => self.successes += 1,
            Err(error) => match error.class() {
                ErrorClass::Limit => {
                    self.limit_trips += 1;
                    if error.worker_ended() {
                        self.retirements += 1;
                    }
                }
                ErrorClass::Deadline => self.timeouts += 1,
                ErrorClass::WorkerCrashed => self.crashes += 1,
                ErrorClass::ProtocolViolation => self.violations += 1,
                ErrorClass::Cancelled => self.cancellations += 1,
                ErrorClass::Spawn => self.spawn_failures += 1,
                // Guest errors and every refusal that still reached a
                // member (the worker untouched).
                _ => self.guest_errors += 1,
            },
        }
    }

    /// Calls that returned, whatever their outcome.
    pub fn returned(&self) -> u64 {
        self.successes
            + self.guest_errors
            + self.limit_trips
            + self.timeouts
            + self.crashes
            + self.violations
            + self.cancellations
            + self.spawn_failures
    }

    /// The worker failures among these counts, which the restart budget
    /// governs (limit trips not included).
    pub fn failures(&self) -> u64 {
        self.timeouts + self.crashes + self.violations + self.spawn_failures + self.found_dead
    }

    pub(crate) fn add(&mut self, other: &Counters) {
        self.invocations += other.invocations;
        self.successes += other.successes;
        self.guest_errors += other.guest_errors;
        self.limit_trips += other.limit_trips;
        self.timeouts += other.timeouts;
        self.crashes += other.crashes;
        self.violations += other.violations;
        self.cancellations += other.cancellations;
        self.spawn_failures += other.spawn_failures;
        self.found_dead += other.found_dead;
        self.restarts += other.restarts;
        self.retirements += other.retirements;
    }
}

/// Latency percentiles in microseconds (nearest-rank; all zero without samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// Samples the percentiles are computed from.
    pub samples: usize,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest sample.
    pub max_us: u64,
}

impl Latency {
    /// Percentiles of `samples` (sorted here).
    pub(crate) fn of(mut samples: Vec<u64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let rank = |percent: usize| {
            // Nearest rank: ceil(p/100 * n), 1-based.
            let n = samples.len();
            let index = (percent * n).div_ceil(100).clamp(1, n) - 1;
            samples[index]
        };
        Self {
            samples: samples.len(),
            p50_us: rank(50),
            p90_us: rank(90),
            p99_us: rank(99),
            max_us: samples[samples.len() - 1],
        }
    }
}

/// The most recent latency samples of one member, in microseconds.
#[derive(Debug, Clone, Default)]
pub(crate) struct LatencyRing {
    samples: Vec<u64>,
    next: usize,
}

impl LatencyRing {
    pub(crate) fn record(&mut self, elapsed: std::time::Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if self.samples.len() < LATENCY_SAMPLES_MAX {
            self.samples.push(micros);
        } else {
            self.samples[self.next] = micros;
        }
        self.next = (self.next + 1) % LATENCY_SAMPLES_MAX;
    }

    pub(crate) fn samples(&self) -> &[u64] {
        &self.samples
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn percentiles_use_nearest_rank() {
        let latency = Latency::of((1..=100).rev().collect());
        assert_eq!(latency.samples, 100);
        assert_eq!(
            (
                latency.p50_us,
                latency.p90_us,
                latency.p99_us,
                latency.max_us
            ),
            (50, 90, 99, 100)
        );
        let one = Latency::of(vec![7]);
        assert_eq!((one.p50_us, one.p99_us, one.max_us), (7, 7, 7));
        assert_eq!(Latency::of(Vec::new()), Latency::default());
    }

    #[test]
    fn the_latency_ring_keeps_only_recent_samples() {
        let mut ring = LatencyRing::default();
        for i in 0..(LATENCY_SAMPLES_MAX as u64 + 10) {
            ring.record(Duration::from_micros(i));
        }
        assert_eq!(ring.samples().len(), LATENCY_SAMPLES_MAX);
        assert!(!ring.samples().contains(&9));
        assert!(ring.samples().contains(&(LATENCY_SAMPLES_MAX as u64 + 9)));
    }

    #[test]
    fn counters_sort_outcomes_by_error_class_and_limit_trips_are_no_failure() {
        use quirl_lua_protocol::records::ErrorCode;
        let mut counters = Counters::default();
        counters.count(&Ok(()));
        let late = Error::new(ErrorClass::Deadline, ErrorCode::ResourceLimit, "late");
        counters.count(&Err(&late));
        let gone = Error::new(ErrorClass::WorkerCrashed, ErrorCode::Lua, "gone");
        counters.count(&Err(&gone));
        let tripped = Error::new(ErrorClass::Limit, ErrorCode::ResourceLimit, "tripped");
        counters.count(&Err(&tripped));
        counters.count(&Err(&tripped));
        let lua = Error::new(ErrorClass::Guest, ErrorCode::Lua, "boom");
        counters.count(&Err(&lua));
        assert_eq!(
            (
                counters.successes,
                counters.timeouts,
                counters.crashes,
                counters.limit_trips,
                counters.retirements,
                counters.guest_errors
            ),
            (1, 1, 1, 2, 2, 1)
        );
        assert_eq!(counters.returned(), 6);
        assert_eq!(counters.failures(), 2);
    }

    #[test]
    fn stats_serialize_with_flattened_counters() {
        let member = MemberStats {
            index: 0,
            generation: 1,
            pid: Some(42),
            running: true,
            state: MemberState::Idle,
            quarantined: false,
            counters: Counters {
                restarts: 3,
                ..Counters::default()
            },
            last_error_code: Some(ErrorCode::ResourceLimit),
            last_error_kind: Some("deadline"),
            latency: Latency::default(),
        };
        let json = serde_json::to_value(&member).unwrap();
        assert_eq!(json["restarts"], 3);
        assert_eq!(json["state"], "idle");
        assert_eq!(json["last_error_code"], "resource_limit");
    }
}
