//! The pool core without processes or clocks: fake workers, made-up
//! instants (DESIGN §17.7).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use quirl_lua_protocol::records::ErrorCode;

use super::*;
use crate::supervision::classify::answered;
use quirl_lua_protocol::records::ShellError;

#[derive(Debug, PartialEq, Eq)]
struct Fake {
    pid: u32,
    ended: bool,
    restarts: u64,
    found_dead: u64,
}

impl Fake {
    fn new(pid: u32) -> Self {
        Self {
            pid,
            ended: false,
            restarts: 0,
            found_dead: 0,
        }
    }
}

impl PoolWorker for Fake {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn has_ended(&self) -> bool {
        self.ended
    }
    fn restarts(&self) -> u64 {
        self.restarts
    }
    fn found_dead(&self) -> u64 {
        self.found_dead
    }
    fn found_retired(&self) -> u64 {
        0
    }
}

fn bare() -> Generation {
    Generation {
        number: 1,
        program: Program::Bare,
    }
}

fn pool(size: u32, options: PoolOptions) -> PoolCore<Fake> {
    let options = options.with_size(size as usize);
    PoolCore::new(
        "test".to_owned(),
        options,
        bare(),
        (1..=size).map(Fake::new).collect(),
    )
}

fn later(start: Instant, ms: u64) -> Instant {
    start + Duration::from_millis(ms)
}

fn lease(core: &mut PoolCore<Fake>, now: Instant) -> Lease<Fake> {
    match core.checkout(None, false, now, now + Duration::from_secs(30)) {
        Dispatch::Run(lease) => lease,
        Dispatch::Queued(_) => panic!("queued"),
        Dispatch::Refused(error) => panic!("refused: {error}"),
    }
}

fn limit_trip() -> Error {
    answered(
        ShellError::new(ErrorCode::ResourceLimit, "out of instructions")
            .with_context("limit: instructions"),
    )
}

fn crash() -> Error {
    Error::new(ErrorClass::WorkerCrashed, ErrorCode::Lua, "died")
}

/// One call on the pool that ends with `outcome`; the worker ends when
/// the outcome ends it, and restarts by itself when it had ended.
fn call(core: &mut PoolCore<Fake>, now: Instant, outcome: Result<(), Error>) -> Vec<Fake> {
    let mut lease = lease(core, now);
    let mut worker = lease.worker.take().unwrap_or_else(|| Fake::new(999));
    if worker.ended {
        worker.ended = false;
        worker.restarts += 1;
    }
    if let Err(error) = &outcome {
        worker.ended = error.worker_ended();
    }
    core.checkin(lease, worker, outcome.as_ref().map(|_| ()), now)
}

fn totals(core: &PoolCore<Fake>, now: Instant) -> crate::supervision::stats::PoolStats {
    core.stats(
        now,
        crate::cgroup::containment_report(crate::cgroup::Containment::ProcessGroup),
        "test",
    )
}

// DESIGN §17.7: a limit trip is a healthy worker retiring by design, not a
// failure of it; the restart budget governs failures.
#[test]
fn twenty_limit_trips_in_a_row_do_not_quarantine_and_four_crashes_do() {
    let start = Instant::now();
    let mut core = pool(2, PoolOptions::new());
    for i in 0..20 {
        drop(call(&mut core, later(start, i), Err(limit_trip())));
    }
    assert!(!core.is_quarantined());
    let stats = totals(&core, later(start, 20));
    assert_eq!(
        (
            stats.totals.limit_trips,
            stats.totals.retirements,
            stats.failures_in_window
        ),
        (20, 20, 0)
    );
    // Each trip ended its worker; each next call restarted it.
    assert_eq!(stats.totals.restarts, 18);
    for i in 0..3 {
        drop(call(&mut core, later(start, 100 + i), Err(crash())));
        assert!(!core.is_quarantined(), "after crash {}", i + 1);
    }
    drop(call(&mut core, later(start, 200), Err(crash())));
    assert!(core.is_quarantined());
    let Dispatch::Refused(error) = core.checkout(None, false, later(start, 201), later(start, 300))
    else {
        panic!("a quarantined pool dispatched a call");
    };
    assert_eq!(error.class(), ErrorClass::Quarantined);
}

#[test]
fn limit_trips_count_as_failures_only_when_asked() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new().with_limit_trips_as_failures(true));
    for i in 0..4 {
        drop(call(&mut core, later(start, i), Err(limit_trip())));
    }
    assert!(core.is_quarantined());
}

// DESIGN §17.7: every dispatched call counts once in `invocations` and, once
// returned, in exactly one outcome counter.
#[test]
fn counters_are_consistent_at_every_snapshot() {
    let start = Instant::now();
    let mut core = pool(2, PoolOptions::new().with_max_restarts(100));
    let outcomes = [
        Ok(()),
        Err(limit_trip()),
        Err(crash()),
        Err(Error::new(ErrorClass::Guest, ErrorCode::Lua, "boom")),
        Err(Error::new(
            ErrorClass::Deadline,
            ErrorCode::ResourceLimit,
            "late",
        )),
        Err(Error::new(
            ErrorClass::ProtocolViolation,
            ErrorCode::Validation,
            "bad",
        )),
        Err(Error::new(
            ErrorClass::Cancelled,
            ErrorCode::ResourceLimit,
            "stop",
        )),
    ];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let now = later(start, i as u64);
        let mut held = lease(&mut core, now);
        let stats = totals(&core, now);
        assert_eq!(stats.totals.invocations, stats.totals.returned() + 1);
        assert_eq!(stats.busy, 1);
        let mut worker = held.worker.take().unwrap();
        if worker.ended {
            worker.ended = false;
            worker.restarts += 1;
        }
        if let Err(error) = &outcome {
            worker.ended = error.worker_ended();
        }
        drop(core.checkin(held, worker, outcome.as_ref().map(|_| ()), now));
        let stats = totals(&core, now);
        assert_eq!(stats.totals.invocations, stats.totals.returned());
    }
    let stats = totals(&core, later(start, 10));
    let t = stats.totals;
    assert_eq!(
        (
            t.successes,
            t.limit_trips,
            t.crashes,
            t.guest_errors,
            t.timeouts,
            t.violations,
            t.cancellations
        ),
        (1, 1, 1, 1, 1, 1, 1)
    );
    // Crash, deadline and violation: three failures; the trip and the
    // cancellation are none.
    assert_eq!(stats.failures_in_window, 3);
}

#[test]
fn a_worker_that_ended_takes_a_ready_spare_at_checkin() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new().with_spares(1));
    let Chore::Start(generation) = core.keeper_chore(false, start) else {
        panic!("the keeper should start a spare");
    };
    assert!(matches!(core.keeper_chore(false, start), Chore::Wait(None)));
    drop(core.spare_started(generation.number, Ok(Fake::new(50)), false, start));
    let retired = call(&mut core, later(start, 1), Err(limit_trip()));
    assert_eq!(retired.len(), 1, "the retired worker is handed back");
    assert_eq!(retired[0].pid, 1);
    let next = lease(&mut core, later(start, 2));
    assert_eq!(next.worker.as_ref().map(|w| w.pid), Some(50));
    let stats = totals(&core, later(start, 2));
    assert_eq!((stats.totals.restarts, stats.spares_used), (1, 1));
    // The next spare waits until the call it was taken for had the CPU.
    assert!(matches!(
        core.keeper_chore(false, later(start, 2)),
        Chore::Wait(Some(_))
    ));
    assert!(matches!(
        core.keeper_chore(false, later(start, 1 + SPARE_RESTART_DELAY_MS)),
        Chore::Start(_)
    ));
}

const SPARE_RESTART_DELAY_MS: u64 = spares::SPARE_RESTART_DELAY.as_millis() as u64;

#[test]
fn a_worker_found_dead_by_the_worker_itself_is_a_failure() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new().with_max_restarts(0));
    let mut held = lease(&mut core, start);
    let mut worker = held.worker.take().unwrap();
    worker.restarts += 1;
    worker.found_dead += 1;
    drop(core.checkin(held, worker, Ok(()), start));
    let stats = totals(&core, start);
    assert_eq!((stats.totals.found_dead, stats.totals.restarts), (1, 1));
    assert!(core.is_quarantined());
}

#[test]
fn the_queue_is_bounded_in_length_and_in_time() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new().with_queue_capacity(1));
    let held = lease(&mut core, start);
    let until = later(start, 100);
    let Dispatch::Queued(ticket) = core.checkout(None, false, start, until) else {
        panic!("expected a queue ticket");
    };
    let Dispatch::Refused(full) = core.checkout(None, false, start, until) else {
        panic!("a full queue accepted a caller");
    };
    assert_eq!(full.class(), ErrorClass::Overloaded);
    assert!(matches!(
        core.checkout(Some(ticket), false, later(start, 50), until),
        Dispatch::Queued(_)
    ));
    let Dispatch::Refused(late) = core.checkout(Some(ticket), false, until, until) else {
        panic!("the wait was not bounded");
    };
    assert_eq!(late.class(), ErrorClass::Overloaded);
    assert!(!core.has_waiters());
    drop(core.checkin(held, Fake::new(1), Ok(()), start));
    assert_eq!(totals(&core, start).rejected, 2);
}

#[test]
fn a_queued_caller_is_served_in_turn() {
    let start = Instant::now();
    let until = later(start, 1_000);
    let mut core = pool(1, PoolOptions::new());
    let mut held = lease(&mut core, start);
    let Dispatch::Queued(first) = core.checkout(None, false, start, until) else {
        panic!("expected a ticket");
    };
    let Dispatch::Queued(second) = core.checkout(None, false, start, until) else {
        panic!("expected a ticket");
    };
    let worker = held.worker.take().unwrap();
    drop(core.checkin(held, worker, Ok(()), start));
    // The second in line may not overtake the first.
    assert!(matches!(
        core.checkout(Some(second), false, start, until),
        Dispatch::Queued(_)
    ));
    assert!(matches!(
        core.checkout(Some(first), false, start, until),
        Dispatch::Run(_)
    ));
}

#[test]
fn dispatch_round_robins_among_idle_members() {
    let start = Instant::now();
    let mut core = pool(3, PoolOptions::new());
    let mut seen = Vec::new();
    for _ in 0..6 {
        let mut held = lease(&mut core, start);
        let worker = held.worker.take().unwrap();
        seen.push(worker.pid);
        drop(core.checkin(held, worker, Ok(()), start));
    }
    assert_eq!(seen, [1, 2, 3, 1, 2, 3]);
}

#[test]
fn close_hands_over_idle_workers_and_spares_and_refuses_calls() {
    let start = Instant::now();
    let mut core = pool(2, PoolOptions::new());
    let held = lease(&mut core, start);
    let Chore::Start(generation) = core.keeper_chore(false, start) else {
        panic!("expected a spare start");
    };
    drop(core.spare_started(generation.number, Ok(Fake::new(7)), false, start));
    let closed = core.close();
    assert!(closed.first);
    assert_eq!(closed.busy, 1);
    assert_eq!(closed.idle.iter().map(|w| w.pid).collect::<Vec<_>>(), [2]);
    assert_eq!(closed.spares.iter().map(|w| w.pid).collect::<Vec<_>>(), [7]);
    assert!(!core.close().first);
    let Dispatch::Refused(error) = core.checkout(None, false, start, start) else {
        panic!("a closed pool dispatched");
    };
    assert_eq!(error.class(), ErrorClass::Unavailable);
    // The busy member's worker is handed back when its call returns.
    let back = core.checkin(held, Fake::new(1), Ok(()), start);
    assert_eq!(back.len(), 1);
    assert!(matches!(core.keeper_chore(false, start), Chore::Stop(_)));
}

#[test]
fn a_reload_replaces_idle_workers_at_once_and_busy_ones_after_their_call() {
    let start = Instant::now();
    let mut core = pool(2, PoolOptions::new());
    let mut held = lease(&mut core, start);
    let generation = Generation {
        number: 2,
        program: Program::Bare,
    };
    let replaced = core
        .install(generation, vec![Fake::new(21), Fake::new(22)])
        .ok()
        .unwrap();
    assert_eq!(replaced.iter().map(|w| w.pid).collect::<Vec<_>>(), [2]);
    let worker = held.worker.take().unwrap();
    let back = core.checkin(held, worker, Ok(()), start);
    assert_eq!(back.iter().map(|w| w.pid).collect::<Vec<_>>(), [1]);
    let stats = totals(&core, start);
    assert_eq!(stats.generation, 2);
    assert!(stats.members.iter().all(|m| m.generation == 2));
}

#[test]
fn a_failed_spare_start_counts_pauses_spares_and_can_quarantine() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new().with_max_restarts(0));
    let Chore::Start(generation) = core.keeper_chore(false, start) else {
        panic!("expected a spare start");
    };
    drop(core.spare_started(generation.number, Err(crash()), false, start));
    let stats = totals(&core, start);
    assert_eq!((stats.spare_failures, stats.spares_paused), (1, true));
    assert!(core.is_quarantined());
    assert!(matches!(core.keeper_chore(false, start), Chore::Wait(None)));
    assert!(core.reset());
    assert!(!core.is_quarantined());
    // A cancelled start is no failure.
    let Chore::Start(generation) = core.keeper_chore(false, start) else {
        panic!("spares resume after a reset");
    };
    drop(core.spare_started(generation.number, Err(crash()), true, start));
    assert!(!core.is_quarantined());
}

#[test]
fn a_cancelled_pool_refuses_calls_without_ending_a_worker() {
    let start = Instant::now();
    let mut core = pool(1, PoolOptions::new());
    let Dispatch::Refused(error) = core.checkout(None, true, start, start) else {
        panic!("a cancelled pool dispatched");
    };
    assert_eq!(error.class(), ErrorClass::Cancelled);
    assert!(!error.worker_ended());
}

#[test]
fn the_restart_window_forgives_old_failures() {
    let start = Instant::now();
    let options = PoolOptions::new()
        .with_max_restarts(1)
        .with_restart_window(Some(Duration::from_secs(60)));
    let mut core = pool(1, options);
    drop(call(&mut core, start, Err(crash())));
    drop(call(&mut core, later(start, 60_000), Err(crash())));
    assert!(!core.is_quarantined());
    drop(call(&mut core, later(start, 60_001), Err(crash())));
    assert!(core.is_quarantined());
}
