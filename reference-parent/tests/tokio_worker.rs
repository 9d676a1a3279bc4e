//! The async drivers (`tokio_worker`, feature `tokio`) against the real
//! reference worker and the test doubles: eval, host calls answered by
//! async functions or the contained process host, the deadline kill of the
//! whole tree (SPEC §13.2, DESIGN §17.4), recovery on a fresh worker after
//! every ending, the async pool's policy (DESIGN §17.7), and nothing left
//! behind after a drop (SPEC §17.1). `tests/recovery.rs` checks the same
//! recovery of the blocking driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use quirl_lua_protocol::records::{CommandOutcome, ErrorCode, HostCall};
use quirl_lua_reference_parent::lifecycle::PoolOptions;
use quirl_lua_reference_parent::tokio_worker::{ContainedHost, Worker, WorkerPool};
use quirl_lua_reference_parent::{
    ErrorClass, LimitKind, Policy, PolicySettings, WorkerCommand, WorkerConfig,
};
use quirl_lua_testkit::procfs;
use rustix::io::Errno;
use rustix::process::{Pid, test_kill_process_group};
use serde_json::json;

/// The reference worker (`quirl-worker` of quirl-lua-reference-worker),
/// built for this test's profile.
fn reference_worker() -> WorkerCommand {
    WorkerCommand::new(quirl_lua_testkit::bins::bin_path(
        "quirl-lua-reference-worker",
        "quirl-worker",
    ))
    .arg(quirl_lua_reference_parent::WORKER_ARGUMENT)
}

fn policy(allow_process: bool, wall_time_ms: u64) -> Policy {
    Policy::new(PolicySettings {
        allow_process,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms,
    })
    .unwrap()
}

/// A guest that outlasts a 200 ms wall-time limit at any VM speed the
/// budget allows: each full collection is charged by the heap it walks
/// (DESIGN §15.6), ~1 s of CPU for the 100,000,000 units of `policy`
/// (a plain `while true do end` spends them in ~0.25 s, close to the
/// deadlines these tests set).
const SLOW_GUEST: &str =
    "local t = {} for i = 1, 300000 do t[i] = {} end while true do collectgarbage() end";

/// A request stuck in a host call that never answers: only a deadline
/// ends it, whatever the VM's speed.
const STUCK_IN_A_HOST_CALL: &str = "return quirl.process.run('sleep').value";

async fn never_answer(
    _: &HostCall,
    _: &ContainedHost,
) -> quirl_lua_reference_parent::tokio_worker::HostAnswer {
    std::future::pending::<()>().await;
    Ok(CommandOutcome {
        status: 0,
        stdout: None,
        stderr: None,
    })
}

fn config(allow_process: bool, wall_time_ms: u64) -> WorkerConfig {
    WorkerConfig::new(reference_worker(), policy(allow_process, wall_time_ms))
}

/// Whether the process group `pid` still exists (a member, or its unreaped
/// leader): `kill(-pid, 0)` fails with `ESRCH` once it is gone.
fn group_exists(pid: u32) -> bool {
    let group = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    match test_kill_process_group(group) {
        Ok(()) => true,
        Err(Errno::SRCH) => false,
        Err(error) => panic!("probing process group {pid}: {error}"),
    }
}

/// Nothing of the worker `pid` is left: no member of its group or session,
/// zombies included.
fn assert_gone(pid: u32) {
    assert!(!group_exists(pid), "process group {pid} still exists");
    let left = procfs::group_or_session_members(i32::try_from(pid).unwrap());
    assert!(left.is_empty(), "left of worker {pid}: {left:?}");
}

#[tokio::test]
async fn eval_keeps_globals_and_a_guest_error_keeps_the_worker() {
    let mut worker = Worker::spawn(config(false, 5_000)).await.unwrap();
    assert!(group_exists(worker.pid()));
    assert_eq!(worker.eval("x = 20").await.unwrap(), json!(null));
    assert_eq!(worker.eval("return x + 22").await.unwrap(), json!(42));
    let error = worker.eval("error('boom')").await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Guest, "{error}");
    assert!(!worker.is_poisoned());
    assert_eq!(worker.eval("return x").await.unwrap(), json!(20));
    let pid = worker.pid();
    worker.shutdown().await.unwrap();
    assert_gone(pid);
}

#[tokio::test]
async fn a_host_call_is_answered_by_an_async_function() {
    let mut worker = Worker::spawn(config(true, 5_000)).await.unwrap();
    let mut seen = Vec::new();
    let host = async |call: &HostCall, _: &ContainedHost| {
        seen.push(call.command.clone());
        // The answer comes from another task: the host really awaits.
        let command = call.command.clone();
        let stdout = tokio::spawn(async move { command.to_uppercase() })
            .await
            .unwrap();
        Ok(CommandOutcome {
            status: 3,
            stdout: Some(stdout),
            stderr: None,
        })
    };
    let value = worker
        .eval_with_host(
            "local r = quirl.process.run('echo hi') return { r.status, r.value }",
            host,
        )
        .await
        .unwrap();
    assert_eq!(value, json!([3, "ECHO HI"]));
    assert_eq!(seen, ["echo hi"]);
    // A host function's error record reaches the guest; the worker goes on.
    let refused = worker
        .eval_with_host(
            "local ok, e = pcall(quirl.process.run, 'rm -rf /') return ok",
            async |_: &HostCall, _: &ContainedHost| {
                Err(quirl_lua_protocol::records::ShellError::new(
                    ErrorCode::InvalidCommand,
                    "not on this host",
                ))
            },
        )
        .await
        .unwrap();
    assert_eq!(refused, json!(false));
    assert_eq!(worker.eval("return 1").await.unwrap(), json!(1));
}

#[tokio::test]
async fn a_stuck_guest_is_killed_at_the_deadline_and_restart_gives_a_working_worker() {
    let mut worker = Worker::spawn(config(false, 200)).await.unwrap();
    let pid = worker.pid();
    let error = worker.eval(SLOW_GUEST).await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(
        error
            .record()
            .context
            .iter()
            .any(|line| line.starts_with(&format!("worker {pid} "))),
        "{error:?}"
    );
    // Killed (or, retiring after its own wall-time answer, exited) and
    // reaped before the error was returned: the context says which.
    assert_gone(pid);
    assert!(worker.is_poisoned());
    // The next call runs on a fresh worker (DESIGN §17.4).
    assert_eq!(worker.eval("return 6 * 7").await.unwrap(), json!(42));
    assert_ne!(worker.pid(), pid);
    assert!(!worker.is_poisoned());
    // An explicit restart replaces a healthy worker too.
    let healthy = worker.pid();
    worker.restart().await.unwrap();
    assert_ne!(worker.pid(), healthy);
    assert_gone(healthy);
    assert_eq!(worker.eval("return 1").await.unwrap(), json!(1));
}

#[tokio::test]
async fn a_host_function_that_outlives_the_deadline_is_dropped_and_the_worker_killed() {
    let mut worker = Worker::spawn(config(true, 200)).await.unwrap();
    let pid = worker.pid();
    let error = worker
        .eval_with_host(
            "return quirl.process.run('sleep').value",
            async |_: &HostCall, _: &ContainedHost| {
                std::future::pending::<()>().await;
                Ok(CommandOutcome {
                    status: 0,
                    stdout: None,
                    stderr: None,
                })
            },
        )
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
    assert_gone(pid);
}

#[tokio::test]
async fn a_dropped_call_future_kills_the_worker_at_once() {
    let mut worker = Worker::spawn(config(false, 60_000)).await.unwrap();
    let pid = worker.pid();
    // The caller gives up on the request (its future is dropped).
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), worker.eval("while true do end")).await;
    assert!(gave_up.is_err());
    assert_gone(pid);
    assert!(worker.is_poisoned());
    // The next call runs on a fresh worker; the dropped call is recorded.
    assert_eq!(worker.eval("return 2").await.unwrap(), json!(2));
    assert_eq!(worker.restarts(), 1);
    assert_eq!(
        worker.last_restart_cause().map(|cause| cause.class()),
        Some(ErrorClass::Cancelled)
    );
}

#[tokio::test]
async fn dropping_the_worker_leaves_no_process() {
    let worker = Worker::spawn(config(false, 5_000)).await.unwrap();
    let pid = worker.pid();
    assert!(group_exists(pid));
    drop(worker);
    assert_gone(pid);
    let zombies = procfs::own_zombies();
    assert!(
        zombies
            .iter()
            .all(|zombie| zombie.pid != i32::try_from(pid).unwrap()),
        "{zombies:?}"
    );
}

#[tokio::test]
async fn a_worker_command_that_does_not_exist_is_a_spawn_error() {
    let policy = policy(false, 1_000);
    let missing = WorkerCommand::new("/nonexistent/quirl-worker");
    let error = Worker::spawn(WorkerConfig::new(missing, policy))
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Spawn, "{error}");
    assert_eq!(error.code(), ErrorCode::ProcessSpawn);
}

#[tokio::test]
async fn without_a_host_function_the_configured_process_host_runs_granted_commands() {
    let config = config(true, 5_000).with_grants(vec!["process.spawn:echo".to_owned()]);
    let mut worker = Worker::spawn(config).await.unwrap();
    let value = worker
        .eval("local r = quirl.process.run('echo hi') return { r.status, r.value }")
        .await
        .unwrap();
    assert_eq!(value, json!([0, "hi\n"]));
    // A program without a grant is refused (the worker checks the grants of
    // initialize, the process host checks its own again, DESIGN §16.2).
    let refused = worker
        .eval("return (pcall(quirl.process.run, 'cat /etc/passwd'))")
        .await
        .unwrap();
    assert_eq!(refused, json!(false));
}

#[tokio::test]
async fn a_pool_runs_calls_concurrently_and_replaces_a_member_after_a_deadline() {
    let options = PoolOptions::new().with_size(2).with_spares(0);
    let pool = WorkerPool::start("async", config(true, 5_000), options)
        .await
        .unwrap();
    let pids = |pool: &WorkerPool| -> Vec<u32> {
        pool.stats()
            .members
            .iter()
            .filter_map(|member| member.pid)
            .collect()
    };
    let before = pids(&pool);
    assert_eq!(before.len(), 2);
    assert_ne!(before[0], before[1]);
    // Two calls at once (on idle members: neither waits for the other).
    let (a, b) = tokio::join!(pool.eval("return 1"), pool.eval("return 2"));
    assert_eq!((a.unwrap(), b.unwrap()), (json!(1), json!(2)));
    let stuck = quirl_lua_protocol::records::Operation::Eval {
        source: STUCK_IN_A_HOST_CALL.to_owned(),
    };
    let soon = std::time::Instant::now() + Duration::from_millis(300);
    let stuck = pool
        .call_with_host(stuck, Some(soon), never_answer)
        .await
        .unwrap_err();
    assert_eq!(stuck.class(), ErrorClass::Deadline, "{stuck}");
    // Exactly one member's worker was killed and reaped.
    let gone: Vec<u32> = before
        .iter()
        .copied()
        .filter(|pid| !group_exists(*pid))
        .collect();
    assert_eq!(gone.len(), 1, "{before:?}");
    assert_gone(gone[0]);
    // Every member serves again; the failed one with a fresh worker.
    for _ in 0..4 {
        assert_eq!(pool.eval("return 42").await.unwrap(), json!(42));
    }
    let after = pids(&pool);
    assert!(!after.contains(&gone[0]), "{after:?}");
    let stats = pool.stats();
    assert_eq!(stats.driver, "tokio");
    assert_eq!((stats.totals.timeouts, stats.totals.restarts), (1, 1));
    let report = pool.shutdown(Duration::from_secs(3)).await;
    assert!(report.is_clean(), "{report:?}");
    for pid in before.into_iter().chain(after) {
        assert_gone(pid);
    }
}

#[tokio::test]
async fn a_pool_of_zero_members_is_refused() {
    let options = PoolOptions::new().with_size(0);
    let error = WorkerPool::start("empty", config(false, 300), options)
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::InvalidInput, "{error}");
}

/// The scripted test double of the lifecycle tests (`crash()` aborts,
/// `violate()` sends a frame that is not JSON, `retire()` answers a
/// tripped limit and exits).
fn scripted(wall_time_ms: u64) -> WorkerConfig {
    WorkerConfig::new(
        WorkerCommand::new(quirl_lua_testkit::bins::scripted_worker()),
        policy(false, wall_time_ms),
    )
}

/// A policy with the given memory and instruction limits.
fn limits(memory_limit_bytes: u64, instruction_limit: u64) -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes,
        instruction_limit,
        wall_time_ms: 10_000,
    })
    .unwrap()
}

/// The endings of DESIGN §17.4: a config, the source that ends the
/// worker, its class and limit kind.
fn endings() -> Vec<(
    &'static str,
    WorkerConfig,
    &'static str,
    ErrorClass,
    Option<LimitKind>,
)> {
    vec![
        (
            "instruction trip",
            WorkerConfig::new(reference_worker(), limits(32 << 20, 1_000_000)),
            "while true do end",
            ErrorClass::Limit,
            Some(LimitKind::Instructions),
        ),
        (
            "memory trip",
            WorkerConfig::new(reference_worker(), limits(8 << 20, 100_000_000)),
            "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1024) .. i end",
            ErrorClass::Limit,
            Some(LimitKind::Memory),
        ),
        (
            "deadline kill",
            config(true, 300).with_grants(vec!["process.spawn:sleep".to_owned()]),
            "return quirl.process.run('sleep 5').status",
            ErrorClass::Deadline,
            Some(LimitKind::Deadline),
        ),
        (
            "crash",
            scripted(10_000),
            "crash()",
            ErrorClass::WorkerCrashed,
            None,
        ),
        (
            "protocol violation",
            scripted(10_000),
            "violate()",
            ErrorClass::ProtocolViolation,
            None,
        ),
    ]
}

// DESIGN §17.4: no call is sent into a worker that ended.
#[tokio::test]
async fn after_each_ending_the_next_call_runs_on_a_fresh_worker() {
    for (name, config, source, class, limit) in endings() {
        let mut worker = Worker::spawn(config).await.unwrap();
        let first = worker.pid();
        let error = worker.eval(source).await.unwrap_err();
        assert_eq!(
            (error.class(), error.limit()),
            (class, limit),
            "{name}: {error}"
        );
        assert!(error.worker_ended(), "{name}");
        assert!(worker.is_poisoned(), "{name}");
        assert_gone(first);
        assert_eq!(worker.eval("return 1").await.unwrap(), json!(1), "{name}");
        assert_ne!(worker.pid(), first, "{name}");
        assert_eq!(worker.restarts(), 1, "{name}");
        let last = worker.pid();
        worker.shutdown().await.unwrap();
        assert_gone(last);
    }
}

// DESIGN §17.7: the async pool keeps the blocking pool's policy.
#[tokio::test]
async fn after_each_ending_a_pools_next_call_runs_on_a_fresh_worker() {
    for (name, config, source, class, _) in endings() {
        let pool = WorkerPool::start("recovery", config, PoolOptions::new())
            .await
            .unwrap();
        let error = pool.eval(source).await.unwrap_err();
        assert_eq!(error.class(), class, "{name}: {error}");
        assert_eq!(pool.eval("return 1").await.unwrap(), json!(1), "{name}");
        let stats = pool.stats();
        assert_eq!(stats.totals.restarts, 1, "{name}: {stats:?}");
        assert_eq!(stats.totals.invocations, 2, "{name}");
        let failures = usize::from(class != ErrorClass::Limit);
        assert_eq!(stats.failures_in_window, failures, "{name}");
        assert!(pool.shutdown(Duration::from_secs(3)).await.is_clean());
    }
}

#[tokio::test]
async fn twenty_limit_trips_do_not_quarantine_a_pool_and_four_crashes_do() {
    let pool = WorkerPool::start("trips", scripted(10_000), PoolOptions::new())
        .await
        .unwrap();
    for round in 0..20 {
        let error = pool.eval("retire()").await.unwrap_err();
        assert_eq!(error.class(), ErrorClass::Limit, "round {round}: {error}");
        assert_eq!(pool.eval("return 1").await.unwrap(), json!(1));
    }
    let stats = pool.stats();
    assert!(!stats.quarantined);
    assert_eq!(
        (stats.totals.limit_trips, stats.failures_in_window),
        (20, 0)
    );
    for crash in 0..3 {
        pool.eval("crash()").await.unwrap_err();
        assert!(!pool.is_quarantined(), "after crash {crash}");
    }
    pool.eval("crash()").await.unwrap_err();
    assert!(pool.is_quarantined());
    let error = pool.eval("return 1").await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Quarantined, "{error}");
    let stats = pool.stats();
    assert_eq!(stats.totals.crashes, 4);
    assert_eq!(
        stats.totals.invocations,
        stats.totals.returned(),
        "consistent after the calls returned"
    );
}

/// SIGKILL `pid` after `after` (from a thread, as an outside killer); the
/// instant of the kill.
fn kill_later(pid: u32, after: Duration) -> std::thread::JoinHandle<std::time::Instant> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let pid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        std::time::Instant::now()
    })
}

/// Generous on a loaded machine; the measured latency (target 10 ms) is in
/// BENCHMARKS.md ("Crash during a host call").
const REPORTED_WITHIN: Duration = Duration::from_millis(200);

// DESIGN §17.6: the host function races the worker's exit.
#[tokio::test]
async fn a_worker_killed_while_its_host_function_is_pending_is_reported_as_a_crash_at_once() {
    let mut worker = Worker::spawn(config(true, 10_000)).await.unwrap();
    let pid = worker.pid();
    let killer = kill_later(pid, Duration::from_millis(100));
    let error = worker
        .eval_with_host(STUCK_IN_A_HOST_CALL, never_answer)
        .await
        .unwrap_err();
    let returned = std::time::Instant::now();
    let killed = killer.join().unwrap();
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert!(
        error
            .record()
            .context
            .iter()
            .any(|line| line
                .starts_with("the worker process exited while its host call was pending")),
        "{error:?}"
    );
    assert!(!error.to_string().contains("kept its output"), "{error}");
    let latency = returned.saturating_duration_since(killed);
    assert!(
        latency < REPORTED_WITHIN,
        "reported {latency:?} after the kill"
    );
    assert_gone(pid);
    assert_eq!(worker.eval("return 2").await.unwrap(), json!(2));
}

// DESIGN §17.6: the contained process host from tokio watches the worker too.
#[tokio::test]
async fn a_worker_killed_while_its_contained_host_command_runs_is_a_crash() {
    let config = config(true, 10_000).with_grants(vec!["process.spawn:sleep".to_owned()]);
    let pool = WorkerPool::start("host-crash", config, PoolOptions::new())
        .await
        .unwrap();
    let pid = pool.stats().members[0].pid.unwrap();
    let killer = kill_later(pid, Duration::from_millis(100));
    let error = pool
        .eval("return quirl.process.run('sleep 5').status")
        .await
        .unwrap_err();
    let returned = std::time::Instant::now();
    let killed = killer.join().unwrap();
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error}");
    assert!(returned.saturating_duration_since(killed) < REPORTED_WITHIN);
    let stats = pool.stats();
    assert_eq!((stats.totals.crashes, stats.totals.timeouts), (1, 0));
    assert_eq!(pool.eval("return 3").await.unwrap(), json!(3));
}

#[tokio::test]
async fn a_host_function_hands_the_calls_it_does_not_take_to_the_contained_host() {
    let grants = vec![
        "process.spawn:echo".to_owned(),
        "process.spawn:mine".to_owned(),
    ];
    let config = config(true, 5_000).with_grants(grants);
    let mut worker = Worker::spawn(config).await.unwrap();
    let value = worker
        .eval_with_host(
            "return { quirl.process.run('mine').value, quirl.process.run('echo hi').value }",
            async |call: &HostCall, contained: &ContainedHost| {
                if call.command == "mine" {
                    Ok(CommandOutcome {
                        status: 0,
                        stdout: Some("taken".to_owned()),
                        stderr: None,
                    })
                } else {
                    contained.run(call).await
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(value, json!(["taken", "hi\n"]));
}

/// The scripted hostile worker of the supervision tests, misbehaving on
/// the first request after `initialize` as `scenario` says.
fn hostile(scenario: &str, wall_time_ms: u64) -> WorkerConfig {
    hostile_with(&[scenario], false, wall_time_ms)
}

/// [`hostile`] with the scenario's parameter, and process access.
fn hostile_with(args: &[&str], allow_process: bool, wall_time_ms: u64) -> WorkerConfig {
    let command = args.iter().fold(
        WorkerCommand::new(quirl_lua_testkit::bins::fake_worker()),
        |command, arg| command.arg(arg),
    );
    WorkerConfig::new(command, policy(allow_process, wall_time_ms))
}

#[tokio::test]
async fn hostile_workers_are_killed_with_the_error_class_of_their_failure() {
    for (scenario, class) in [
        ("malformed-json", ErrorClass::ProtocolViolation),
        ("wrong-response-id", ErrorClass::ProtocolViolation),
        ("crash", ErrorClass::WorkerCrashed),
        ("exit0", ErrorClass::WorkerCrashed),
        ("never-answer", ErrorClass::Deadline),
        // A host call for another request, on a session without process
        // access (SPEC §9.2).
        ("host-call-wrong-request-id", ErrorClass::ProtocolViolation),
        // The worker's pipe-holding grandchild dies with its group.
        ("grandchild-silent", ErrorClass::Deadline),
        // The worker exits while its grandchild holds the pipe: its exit
        // (pidfd) ends the request, not the deadline.
        ("grandchild-exit", ErrorClass::WorkerCrashed),
    ] {
        let mut worker = Worker::spawn(hostile(scenario, 300)).await.unwrap();
        let pid = worker.pid();
        let error = worker.eval("return 1").await.unwrap_err();
        assert_eq!(error.class(), class, "{scenario}: {error}");
        // Nothing of the group lives on. (A grandchild killed with it is
        // an orphan's zombie until its new parent reaps it; the worker
        // itself was reaped here.)
        let living =
            procfs::living_members_after(i32::try_from(pid).unwrap(), Duration::from_secs(5));
        assert!(living.is_empty(), "{scenario}: {living:?}");
        let zombies = procfs::own_zombies();
        let own = i32::try_from(pid).unwrap();
        assert!(
            zombies.iter().all(|z| z.pid != own),
            "{scenario}: {zombies:?}"
        );
        // The next call runs on a fresh worker (of the same misbehaving
        // program here): never on the one that failed.
        let _ = worker.eval("return 1").await;
        assert_eq!(worker.restarts(), 1, "{scenario}");
        assert_ne!(worker.pid(), pid, "{scenario}");
    }
}

// SPEC §13.1-b: a worker that exited 0 after a `resource_limit` answer is
// never sent another request: the next one runs on a fresh worker.
#[tokio::test]
async fn a_worker_that_retired_after_a_limit_error_is_replaced_before_the_next_request() {
    let mut worker = Worker::spawn(hostile("retire-after-limit", 5_000))
        .await
        .unwrap();
    let pid = worker.pid();
    let first = worker.eval("while true do end").await.unwrap_err();
    // This worker names no limit kind (SPEC §11.4): a guest error.
    assert_eq!(first.class(), ErrorClass::Guest, "{first}");
    assert_eq!(first.code(), ErrorCode::ResourceLimit);
    for _ in 0..20 {
        let next = worker.eval("return 1").await.unwrap_err();
        assert_eq!(next.code(), ErrorCode::ResourceLimit, "{next}");
    }
    assert_eq!((worker.restarts(), worker.found_dead()), (20, 0));
    drop(worker);
    assert_gone(pid);
}

#[tokio::test]
async fn a_worker_that_refuses_initialize_is_a_spawn_error_and_is_reaped() {
    let error = Worker::spawn(hostile("init-guest-error", 300))
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Spawn, "{error}");
    assert!(
        error
            .record()
            .context
            .iter()
            .any(|line| line.contains("refused initialize")),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_cancellation_token_kills_the_worker_mid_request() {
    let token = quirl_lua_reference_parent::Cancel::new();
    let config = config(false, 60_000).with_cancel(token.clone());
    let mut worker = Worker::spawn(config).await.unwrap();
    let pid = worker.pid();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });
    let error = worker.eval(SLOW_GUEST).await.unwrap_err();
    canceller.await.unwrap();
    assert_eq!(error.class(), ErrorClass::Cancelled, "{error}");
    assert_eq!(error.limit(), Some(LimitKind::Cancellation));
    assert_gone(pid);
    // The token stays cancelled: no fresh worker is started under it.
    let later = worker.eval("return 1").await.unwrap_err();
    assert_eq!(later.class(), ErrorClass::Cancelled, "{later}");
    assert!(!later.worker_ended());
}

#[tokio::test]
async fn sixteen_host_calls_are_answered_and_a_seventeenth_is_a_violation() {
    let mut answered = 0;
    let mut worker = Worker::spawn(hostile_with(&["host-calls", "16"], true, 5_000))
        .await
        .unwrap();
    let host = async |call: &HostCall, _: &ContainedHost| {
        tokio::task::yield_now().await;
        answered += 1;
        Ok(CommandOutcome {
            status: 0,
            stdout: Some(call.call_id.to_string()),
            stderr: None,
        })
    };
    assert_eq!(
        worker.eval_with_host("return 1", host).await.unwrap(),
        json!(1)
    );
    assert_eq!(answered, 16);

    let mut worker = Worker::spawn(hostile_with(&["host-calls", "17"], true, 5_000))
        .await
        .unwrap();
    let pid = worker.pid();
    let host = async |_: &HostCall, _: &ContainedHost| {
        Ok(CommandOutcome {
            status: 0,
            stdout: None,
            stderr: None,
        })
    };
    let error = worker.eval_with_host("return 1", host).await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::ProtocolViolation, "{error}");
    assert_gone(pid);
}

#[tokio::test]
async fn the_callers_deadline_replaces_the_policys() {
    use quirl_lua_protocol::records::Operation;
    let stuck = || Operation::Eval {
        source: SLOW_GUEST.to_owned(),
    };
    // Earlier than the policy's minute: the parent kills at it.
    let mut worker = Worker::spawn(config(false, 60_000)).await.unwrap();
    let pid = worker.pid();
    let soon = std::time::Instant::now() + Duration::from_millis(200);
    let error = worker.call(stuck(), Some(soon)).await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
    // The worker's own clock is a minute away: the parent's kill ended it.
    let killed = format!("worker {pid} was killed by signal 9 (SIGKILL)");
    assert!(error.record().context.contains(&killed), "{error:?}");
    assert_gone(pid);
    // Later than the policy's 200 ms: the worker's own wall-time limit
    // answers first, a limit trip, and the parent did not kill it.
    let mut worker = Worker::spawn(config(false, 200)).await.unwrap();
    let late = std::time::Instant::now() + Duration::from_secs(60);
    let error = worker.call(stuck(), Some(late)).await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Limit, "{error}");
    assert_eq!(error.limit(), Some(LimitKind::WallTime));
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
}

#[tokio::test]
async fn the_typed_shortcuts_load_a_plugin_and_call_its_callbacks() {
    let mut worker = Worker::spawn(config(false, 5_000)).await.unwrap();
    worker.check("return 1", "ok.lua").await.unwrap();
    let broken = worker.check("return (", "broken.lua").await.unwrap_err();
    assert_eq!(broken.class(), ErrorClass::Guest, "{broken}");
    let source = quirl_lua_testkit::scratch::plugin_source("v7");
    let registrations = worker.load_plugin(&source, "plugin.lua").await.unwrap();
    let registered = serde_json::to_value(&registrations).unwrap();
    assert!(
        registered.to_string().contains("\"version\""),
        "{registered}"
    );
    let rendered = worker.render_prompt("version", json!({})).await.unwrap();
    assert_eq!(rendered.as_deref(), Some("v7"));
    assert!(!worker.is_poisoned());
}

/// The handle and its futures are `Send`: a worker can live in a spawned
/// task (of a multi-threaded runtime too).
#[tokio::test]
async fn a_worker_runs_inside_a_spawned_task() {
    let task = tokio::spawn(async {
        let mut worker = Worker::spawn(config(true, 5_000)).await?;
        let value = worker
            .eval_with_host(
                "return quirl.process.run('echo sent').value",
                async |call: &HostCall, _: &ContainedHost| {
                    Ok(CommandOutcome {
                        status: 0,
                        stdout: Some(call.command.clone()),
                        stderr: None,
                    })
                },
            )
            .await?;
        let pid = worker.pid();
        worker.shutdown().await?;
        Ok::<_, quirl_lua_reference_parent::Error>((value, pid))
    });
    let (value, pid) = task.await.unwrap().unwrap();
    assert_eq!(value, json!("echo sent"));
    assert_gone(pid);
    let pool = std::sync::Arc::new(
        WorkerPool::start("spawned", config(false, 5_000), PoolOptions::new())
            .await
            .unwrap(),
    );
    let shared = std::sync::Arc::clone(&pool);
    let answer = tokio::spawn(async move { shared.eval("return 5").await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, json!(5));
}
