//! Plugin lifecycle against the real reference worker (`quirl-worker
//! --internal-lua-worker-v1`): quarantine of a Lua plugin that loops,
//! reloads of Lua sources, and a pool of two running Lua concurrently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;
#[path = "support/lifecycle.rs"]
mod support;

use std::time::{Duration, Instant};

use quirl_lua_protocol::records::{ErrorCode, Operation};
use quirl_lua_reference_parent::lifecycle::{PluginHost, PluginManifest, PoolOptions, WorkerPool};
use quirl_lua_reference_parent::{
    ErrorClass, LimitKind, Policy, PolicySettings, WorkerCommand, WorkerConfig,
};
use serde_json::json;

use support::{LOOPING_PLUGIN, Scratch, eventually, leftovers, member_pids, plugin_source};

/// About a second of interpreted work in a debug build, far below the
/// instruction budget.
const CPU_BOUND: &str = "local x = 0 for i = 1, 10000000 do x = x + i % 7 end return x";
const CPU_BOUND_RESULT: u64 = 29_999_997;

fn real_worker() -> WorkerCommand {
    support::reference_worker()
}

fn policy(wall_time_ms: u64) -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms,
    })
    .unwrap()
}

fn manifest(name: &str, path: &std::path::Path, wall_time_ms: u64) -> PluginManifest {
    PluginManifest::new(name, path)
        .with_worker(real_worker())
        .with_policy(policy(wall_time_ms))
}

#[test]
fn a_lua_plugin_that_times_out_four_times_is_quarantined_and_fails_fast() {
    let scratch = Scratch::new("lua-quarantine");
    let path = scratch.write("loop.lua", LOOPING_PLUGIN);
    // No spare, so that each attempt's worker is the member's until its
    // next call (a spare may take a slot at dispatch and be swapped out at
    // checkin, unseen by a snapshot between calls).
    let options = PoolOptions::new().with_max_restarts(3).with_spares(0);
    let host = PluginHost::start(manifest("looping", &path, 50).with_pool(options)).unwrap();
    let mut pids = member_pids(&host.stats());
    for attempt in 0..4 {
        let error = host.render_prompt("version", json!({})).unwrap_err();
        assert_eq!(
            error.class(),
            ErrorClass::Deadline,
            "attempt {attempt}: {error}"
        );
        assert_eq!(error.code(), ErrorCode::ResourceLimit);
        pids.extend(member_pids(&host.stats()));
    }
    let stats = host.stats();
    assert!(stats.quarantined);
    assert_eq!((stats.totals.timeouts, stats.totals.restarts), (4, 3));
    for _ in 0..3 {
        let started = Instant::now();
        let error = host.render_prompt("version", json!({})).unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(error.class(), ErrorClass::Quarantined, "{error}");
        assert!(elapsed < Duration::from_millis(10), "took {elapsed:?}");
    }
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 4);
    for pid in pids {
        assert!(leftovers(pid).is_empty(), "worker {pid} left something");
    }
}

#[test]
fn reload_picks_up_a_changed_lua_source() {
    let scratch = Scratch::new("lua-reload");
    let path = scratch.write("plugin.lua", &plugin_source("v1"));
    let host = PluginHost::start(manifest("prompt", &path, 1_000).with_pool_size(2)).unwrap();
    assert_eq!(host.registrations().prompt_segments[0].name, "version");
    assert_eq!(
        host.render_prompt("version", json!({})).unwrap(),
        Some("v1".to_owned())
    );
    scratch.write("plugin.lua", &plugin_source("v2"));
    let reload = host.reload().unwrap();
    assert_eq!(reload.generation, 2);
    for _ in 0..4 {
        assert_eq!(
            host.render_prompt("version", json!({})).unwrap(),
            Some("v2".to_owned())
        );
    }
    assert!(host.stats().members.iter().all(|m| m.generation == 2));
}

#[test]
fn a_reload_with_a_lua_syntax_error_leaves_the_old_generation_serving() {
    let scratch = Scratch::new("lua-bad-reload");
    let path = scratch.write("plugin.lua", &plugin_source("v1"));
    let host = PluginHost::start(manifest("prompt", &path, 1_000).with_pool_size(2)).unwrap();
    let pids = member_pids(&host.stats());
    scratch.write("plugin.lua", "local x = = 1\n");
    let error = host.reload().unwrap_err();
    assert_eq!(error.class(), ErrorClass::Guest, "{error}");
    assert_eq!(error.code(), ErrorCode::Lua);
    assert!(
        error.to_string().contains("generation 1 keeps serving"),
        "{error}"
    );
    assert_eq!(
        host.render_prompt("version", json!({})).unwrap(),
        Some("v1".to_owned())
    );
    let stats = host.stats();
    assert_eq!((stats.generation, member_pids(&stats)), (1, pids));
}

/// Both workers observed runnable at the same instant while each runs one
/// CPU-bound Lua script.
#[test]
fn a_pool_of_two_runs_two_cpu_bound_lua_scripts_concurrently() {
    let config = WorkerConfig::new(real_worker(), policy(30_000));
    let pool = WorkerPool::start("cpu", config, PoolOptions::new().with_size(2)).unwrap();
    let pids = member_pids(&pool.stats());
    let overlap = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| pool.eval(CPU_BOUND)))
            .collect();
        let mut overlap = false;
        let until = Instant::now() + Duration::from_secs(30);
        while !calls.iter().all(|call| call.is_finished()) && Instant::now() < until {
            let running = pids
                .iter()
                .filter(|pid| {
                    procfs::stat(i32::try_from(**pid).unwrap()).is_some_and(|s| s.state == 'R')
                })
                .count();
            overlap |= running == 2;
            std::thread::sleep(Duration::from_millis(1));
        }
        for call in calls {
            assert_eq!(call.join().unwrap().unwrap(), json!(CPU_BOUND_RESULT));
        }
        overlap
    });
    assert!(overlap, "the two scripts never ran at the same time");
}

#[test]
fn a_lua_request_killed_on_one_member_does_not_fail_the_other() {
    let config = WorkerConfig::new(real_worker(), policy(30_000));
    let pool = WorkerPool::start("isolated", config, PoolOptions::new().with_size(2)).unwrap();
    std::thread::scope(|scope| {
        let long = scope.spawn(|| pool.eval(CPU_BOUND));
        assert!(eventually(Duration::from_secs(5), || pool.stats().busy == 1));
        let error = pool
            .with_worker(|worker| {
                let operation = Operation::Eval {
                    source: "while true do end".to_owned(),
                };
                worker.call(operation, Some(Instant::now() + Duration::from_millis(50)))
            })
            .unwrap_err();
        assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
        assert_eq!(long.join().unwrap().unwrap(), json!(CPU_BOUND_RESULT));
    });
    assert_eq!(pool.eval("return 6 * 7").unwrap(), json!(42));
    let stats = pool.stats();
    assert_eq!(stats.totals.timeouts, 1);
    assert_eq!(stats.totals.successes, 2);
    assert!(!stats.quarantined);
}

#[test]
fn a_tripped_instruction_budget_retires_the_vm_and_is_no_failure() {
    // DESIGN §17.7: the real worker answers `limit: instructions` and
    // retires; the next call runs on a fresh worker; trips do not spend
    // the restart budget (1 here), whether the slot waits for the next
    // call (no spare) or takes a spare at once.
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 10_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    for spares in [0, 1] {
        let config = WorkerConfig::new(real_worker(), policy);
        let options = PoolOptions::new().with_max_restarts(1).with_spares(spares);
        let pool = WorkerPool::start("budget", config, options).unwrap();
        let patience = Duration::from_secs(10);
        for round in 0..5 {
            if spares > 0 {
                assert!(eventually(patience, || pool.stats().spares == 1));
            }
            let spare = pool.stats().spare_pids.first().copied();
            let first = member_pids(&pool.stats())[0];
            let error = pool.eval("while true do end").unwrap_err();
            assert_eq!(error.class(), ErrorClass::Limit, "{error}");
            assert_eq!(error.limit(), Some(LimitKind::Instructions));
            assert_eq!(error.code(), ErrorCode::ResourceLimit);
            assert!(leftovers(first).is_empty(), "the tripped VM was retired");
            if let Some(spare) = spare {
                assert_eq!(member_pids(&pool.stats()), vec![spare], "round {round}");
            }
            assert_eq!(pool.eval("return 1").unwrap(), json!(1), "round {round}");
        }
        let stats = pool.stats();
        assert!(!stats.quarantined, "spares {spares}");
        assert_eq!(stats.failures_in_window, 0);
        assert_eq!(
            (
                stats.totals.limit_trips,
                stats.totals.retirements,
                stats.totals.restarts
            ),
            (5, 5, 5)
        );
        assert_eq!(stats.spares_used, if spares > 0 { 5 } else { 0 });
    }
}
