//! Scripted hostile workers against the worker handle (SPEC §13.2, DESIGN §17.3, §17.4).
//!
//! Each test drives `quirl-lua-fake-worker SCENARIO` and checks: the error
//! class, that the call returned within deadline + 200 ms, that nothing of
//! the worker's process group is left alive, that this process has no
//! zombie child, that no thread was left behind, and that the handle never
//! sends another request into the worker that failed: its next call runs
//! on a fresh worker (DESIGN §17.4).
//!
//! The tests share /proc-wide observations (zombies, threads), so they run
//! one at a time under a lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::{
    Error, ErrorClass, Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig,
};

/// Generous only where the bound is the behaviour: "returned within deadline + 200 ms".
const LATE_MAX: Duration = Duration::from_millis(200);
/// Deadline used by scenarios that must be cut off by it.
const WALL_MS: u64 = 300;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn fake(args: &[&str]) -> WorkerCommand {
    args.iter().fold(
        WorkerCommand::new(quirl_lua_testkit::bins::fake_worker()),
        |c, a| c.arg(a),
    )
}

fn config(args: &[&str], allow_process: bool) -> WorkerConfig {
    let policy = Policy::new(PolicySettings {
        allow_process,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: WALL_MS,
    })
    .unwrap();
    WorkerConfig::new(fake(args), policy).with_startup_timeout(Duration::from_secs(10))
}

/// Spawn the scenario, run one eval, and check everything a failure must leave behind.
fn hostile(args: &[&str], allow_process: bool) -> Error {
    hostile_timed(args, allow_process).0
}

/// As [`hostile`], also returning how long the failing call took.
fn hostile_timed(args: &[&str], allow_process: bool) -> (Error, Duration) {
    let _guard = serial();
    let mut worker = Worker::spawn(config(args, allow_process)).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let started = Instant::now();
    let error = worker.eval("return 1").unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed <= Duration::from_millis(WALL_MS) + LATE_MAX,
        "{args:?}: returned after {elapsed:?}: {error}"
    );
    assert_cleaned_up(pid, &mut worker, args);
    (error, elapsed)
}

fn assert_cleaned_up(pid: i32, worker: &mut Worker, args: &[&str]) {
    assert!(
        worker.is_poisoned(),
        "{args:?}: the failed worker is still in use"
    );
    assert_gone(pid, args);
    // DESIGN §17.4: the next call runs on a fresh worker, never the old one
    // (the same scenario may fail it again: it is the same program).
    let restarts = worker.restarts();
    let _ = worker.eval("return 1");
    assert_eq!(worker.restarts(), restarts + 1, "{args:?}: no fresh worker");
    assert_ne!(i32::try_from(worker.pid()).unwrap(), pid, "{args:?}");
}

/// Nothing of the worker `pid` is left: no living member of its group, it
/// was reaped, no zombie child, no thread of the library.
fn assert_gone(pid: i32, args: &[&str]) {
    let living = procfs::living_members_after(pid, Duration::from_secs(1));
    assert!(living.is_empty(), "{args:?}: left alive: {living:?}");
    assert!(
        procfs::stat(pid).is_none_or(|p| p.ppid != std::process::id().cast_signed()),
        "{args:?}: worker not reaped"
    );
    let zombies = procfs::own_zombies();
    assert!(zombies.is_empty(), "{args:?}: zombies: {zombies:?}");
    let threads = procfs::library_threads();
    assert!(
        threads.is_empty(),
        "{args:?}: threads left behind: {threads:?}"
    );
}

fn assert_violation(error: &Error, protocol_kind: &str) {
    assert_eq!(error.class(), ErrorClass::ProtocolViolation, "{error}");
    assert_eq!(
        error.protocol_kind().map(|k| k.as_str()),
        Some(protocol_kind),
        "{error}"
    );
}

// SPEC §4.3-b
#[test]
fn oversized_header_is_a_resource_limit_violation() {
    let error = hostile(&["oversized-header"], false);
    assert_violation(&error, "oversized_frame");
    assert_eq!(error.code().as_str(), "resource_limit");
}

// SPEC §4.3-b
#[test]
fn header_one_past_the_maximum_is_rejected_at_once() {
    let (error, elapsed) = hostile_timed(&["header", "5242881"], false);
    assert_violation(&error, "oversized_frame");
    assert!(
        elapsed < Duration::from_millis(WALL_MS),
        "waited for the deadline"
    );
}

#[test]
fn maximum_header_then_stall_is_cut_off_at_the_deadline() {
    let error = hostile(&["header", "5242880"], false);
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
}

#[test]
fn malformed_json_is_a_validation_violation() {
    let error = hostile(&["malformed-json"], false);
    assert_violation(&error, "malformed_json");
    assert_eq!(error.code().as_str(), "validation");
}

#[test]
fn truncated_frame_then_exit_is_a_violation() {
    let error = hostile(&["truncated-then-exit"], false);
    assert_violation(&error, "truncated_frame");
}

// SPEC §9.1-c
#[test]
fn wrong_response_id_is_an_identity_mismatch() {
    let error = hostile(&["wrong-response-id"], false);
    assert_violation(&error, "identity_mismatch");
}

#[test]
fn wrong_version_is_rejected() {
    let error = hostile(&["wrong-version"], false);
    assert_violation(&error, "bad_version");
}

#[test]
fn response_with_both_ok_and_error_is_inconsistent() {
    let error = hostile(&["ok-and-error"], false);
    assert_violation(&error, "inconsistent_response");
}

// SPEC §9.2-a
#[test]
fn host_call_with_wrong_request_id_is_an_identity_mismatch() {
    let error = hostile(&["host-call-wrong-request-id"], true);
    assert_violation(&error, "identity_mismatch");
}

#[test]
fn host_call_id_zero_is_a_violation() {
    let error = hostile(&["host-call-id-zero"], true);
    // The strict decoder already rejects call id 0 as out of its domain.
    assert_violation(&error, "domain_bounds");
}

#[test]
fn seventeenth_host_call_is_a_violation() {
    let error = hostile(&["host-calls", "17"], true);
    assert_violation(&error, "host_call_limit");
}

#[test]
fn sixteen_host_calls_are_answered_and_the_request_completes() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["host-calls", "16"], true)).unwrap();
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    assert!(!worker.is_poisoned());
}

// SPEC §7.1-b
#[test]
fn host_call_while_process_access_is_disabled_is_a_violation() {
    let error = hostile(&["host-calls", "1"], false);
    assert_violation(&error, "unexpected_frame");
}

// SPEC §7.1-b
#[test]
fn host_call_refused_by_policy_is_a_violation_even_if_process_is_enabled() {
    let _guard = serial();
    let config = config(&["host-calls", "1"], false).with_process_enabled(true);
    let mut worker = Worker::spawn(config).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let error = worker.eval("return 1").unwrap_err();
    assert_violation(&error, "unexpected_frame");
    assert_cleaned_up(pid, &mut worker, &["host-calls", "1"]);
}

// SPEC §13.2-a, §13.2-c: at the deadline the tree is killed, the worker reaped, the reading
// finished and the handle poisoned before the error returns (`hostile` checks each).
#[test]
fn never_answering_worker_is_killed_at_the_deadline() {
    let (error, elapsed) = hostile_timed(&["never-answer"], false);
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
    assert_eq!(error.code().as_str(), "resource_limit");
    assert!(elapsed >= Duration::from_millis(WALL_MS));
}

#[test]
fn answer_after_the_deadline_is_not_accepted() {
    let late = (WALL_MS + 150).to_string();
    let error = hostile(&["answer-after", &late], false);
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
}

// SPEC §13.2-a
#[test]
fn crashing_worker_is_reported_as_a_lua_failure() {
    let error = hostile(&["crash"], false);
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert_eq!(error.code().as_str(), "lua");
    assert!(error.to_string().contains("signal 6"), "{error}");
}

#[test]
fn worker_exiting_zero_mid_request_is_a_crash() {
    let error = hostile(&["exit0"], false);
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert!(
        error.to_string().contains("exited with status 0"),
        "{error}"
    );
}

// SPEC §13.2-a, §18-a: the fake worker is not locked down and forks; the parent kills the whole
// tree anyway.
#[test]
fn silent_worker_with_a_pipe_holding_grandchild_is_killed_with_its_tree() {
    let error = hostile(&["grandchild-silent"], false);
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
}

// SPEC §13.2-a, §18-a
#[test]
fn worker_exit_is_noticed_while_a_grandchild_holds_the_pipe() {
    let (error, elapsed) = hostile_timed(&["grandchild-exit"], false);
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert!(
        elapsed < Duration::from_millis(WALL_MS),
        "waited for the deadline: {error}"
    );
}

// SPEC §13.2-a
#[test]
fn slow_loris_frame_is_cut_off_at_the_deadline() {
    let error = hostile(&["slow-loris"], false);
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
}

#[test]
fn cancellation_from_another_thread_kills_the_worker_promptly() {
    let _guard = serial();
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 60_000,
    })
    .unwrap();
    let mut worker = Worker::spawn(WorkerConfig::new(fake(&["never-answer"]), policy)).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let token = worker.cancel_token();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let cancelled_at = Instant::now();
        token.cancel();
        cancelled_at
    });
    let error = worker.eval("return 1").unwrap_err();
    let returned = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    assert_eq!(error.class(), ErrorClass::Cancelled, "{error}");
    assert_eq!(error.code().as_str(), "resource_limit");
    assert!(
        returned.duration_since(cancelled_at) < LATE_MAX,
        "cancellation took {:?}",
        returned.duration_since(cancelled_at)
    );
    assert!(worker.is_poisoned());
    assert_gone(pid, &["never-answer (cancelled)"]);
    // The token stays cancelled: no fresh worker is started under it.
    let again = worker.eval("return 1").unwrap_err();
    assert_eq!(again.class(), ErrorClass::Cancelled, "{again}");
    assert!(!again.worker_ended());
    assert_eq!(worker.restarts(), 0);
}

#[test]
fn worker_failing_during_initialize_fails_the_spawn_and_leaves_nothing() {
    let _guard = serial();
    let error = Worker::spawn(config(&["init-crash"], false)).unwrap_err();
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert!(error.to_string().contains("initializ"), "{error}");
    assert!(procfs::own_zombies().is_empty());
}

#[test]
fn noise_on_stdout_does_not_reach_the_protocol() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["stdout-noise"], false)).unwrap();
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
}

#[test]
fn healthy_worker_serves_many_requests_and_shuts_down_cleanly() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["echo"], false)).unwrap();
    for _ in 0..100 {
        assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    }
    let pid = i32::try_from(worker.pid()).unwrap();
    worker.shutdown().unwrap();
    assert!(procfs::living_members_after(pid, Duration::from_secs(1)).is_empty());
    assert!(procfs::own_zombies().is_empty());
}

// SPEC §18-a: a worker that forks (no lockdown stops it) leaves nothing when its handle is dropped.
#[test]
fn dropping_the_handle_ends_the_worker_and_its_descendants() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["fork-at-start"], false)).unwrap();
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    let pid = i32::try_from(worker.pid()).unwrap();
    assert!(
        procfs::group_or_session_members(pid).len() >= 2,
        "the holder grandchild was not started"
    );
    drop(worker);
    let living = procfs::living_members_after(pid, Duration::from_secs(1));
    assert!(living.is_empty(), "left alive: {living:?}");
    assert!(procfs::own_zombies().is_empty());
    assert!(procfs::library_threads().is_empty());
}

#[test]
fn spawning_a_missing_program_is_a_spawn_error() {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 1 << 20,
        instruction_limit: 1000,
        wall_time_ms: 100,
    })
    .unwrap();
    let error = Worker::spawn(WorkerConfig::new(
        WorkerCommand::new("/nonexistent/worker"),
        policy,
    ))
    .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Spawn);
    assert_eq!(error.code().as_str(), "process_spawn");
}

#[test]
fn unsolicited_frame_while_idle_is_caught_by_the_next_request() {
    let error = hostile(&["unsolicited"], false);
    assert_eq!(error.class(), ErrorClass::ProtocolViolation, "{error}");
}

#[test]
fn oversized_request_is_refused_before_sending_and_the_worker_stays_usable() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["echo"], false)).unwrap();
    let source = "x".repeat(5 * 1024 * 1024);
    let error = worker.eval(&source).unwrap_err();
    assert_eq!(error.class(), ErrorClass::InvalidInput, "{error}");
    assert!(!worker.is_poisoned());
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
}

#[test]
fn the_worker_handle_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Worker>();
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["echo"], false)).unwrap();
    let mut worker = std::thread::spawn(move || {
        assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
        worker
    })
    .join()
    .unwrap();
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
}

// SPEC §13.1-b: a worker that exited 0 after a `resource_limit` answer retired: it is
// never sent another request; the next call runs on a fresh worker, and the
// retirement is no failure of the worker.
#[test]
fn worker_retiring_after_a_limit_error_is_replaced_before_the_next_request() {
    let _guard = serial();
    let mut worker = Worker::spawn(config(&["retire-after-limit"], false)).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let first = worker.eval("while true do end").unwrap_err();
    // This worker names no limit kind (SPEC §11.4): a guest error to the
    // parent, which keeps the worker until it is found retired.
    assert_eq!(first.class(), ErrorClass::Guest, "{first}");
    assert_eq!(first.code().as_str(), "resource_limit");
    // Whether or not its exit was seen before the next request, that
    // request runs on a fresh worker (and is answered, here again with the
    // scenario's limit error).
    for _ in 0..20 {
        let next = worker.eval("return 1").unwrap_err();
        assert_eq!(next.code().as_str(), "resource_limit", "{next}");
    }
    assert_eq!(worker.restarts(), 20);
    assert_eq!(worker.found_dead(), 0, "a retirement is no death");
    assert_eq!(
        worker.last_restart_cause().map(Error::class),
        Some(ErrorClass::Limit)
    );
    // The last one retired too; the handle reaps it when dropped.
    drop(worker);
    assert_gone(pid, &["retire-after-limit"]);
}

// SPEC §13.2-b, §13.2-c: a worker that ended by itself mid-request is still
// killed as a group before it is reaped. Its unreaped pid pins the group, so
// the group SIGKILL succeeds; sent after the reap it would fail with ESRCH,
// which the handle reports as a `cleanup:` context line. The reap is done
// before the error returns (its status is in the context).
#[test]
fn a_worker_that_ended_by_itself_is_group_killed_before_it_is_reaped() {
    for (scenario, status) in [("exit0", "exited with status 0"), ("crash", "signal 6")] {
        let error = hostile(&[scenario], false);
        assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
        let context = &error.record().context;
        assert!(
            context
                .iter()
                .any(|line| line.starts_with("worker ") && line.contains(status)),
            "{scenario}: not reaped before the error returned: {context:?}"
        );
        assert!(
            !context.iter().any(|line| line.starts_with("cleanup:")),
            "{scenario}: {context:?}"
        );
    }
}
