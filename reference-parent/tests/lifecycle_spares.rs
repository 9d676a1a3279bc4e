//! Warm spares of a pool (DESIGN §17.7): a replacement takes a spare that was
//! started before the failure, spares count in the stats, a failed spare
//! start counts against the restart budget and pauses spares, spares are
//! reaped on shutdown, and `spares(0)` keeps none.
//!
//! These run against the scripted test double (`retire()` answers with a
//! tripped limit and exits, `trip()` answers the same and would keep
//! serving, `crash()` aborts).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/lifecycle.rs"]
mod support;

use std::time::Duration;

use quirl_lua_protocol::records::ErrorCode;
use quirl_lua_reference_parent::lifecycle::{PluginHost, PluginManifest, PoolOptions, WorkerPool};
use quirl_lua_reference_parent::{ErrorClass, WorkerCommand, WorkerConfig};
use serde_json::json;

use support::{
    Scratch, eventually, leftovers, member_pids, plugin_source, policy, scripted_worker,
};

const PATIENCE: Duration = Duration::from_secs(10);

fn pool(command: WorkerCommand, options: PoolOptions) -> WorkerPool {
    let config = WorkerConfig::new(command, policy(1_000));
    WorkerPool::start("spares", config, options).unwrap()
}

/// Wait until the pool reports `count` ready spares; their pids.
fn ready_spares(pool: &WorkerPool, count: usize) -> Vec<u32> {
    assert!(
        eventually(PATIENCE, || pool.stats().spares == count),
        "spares never reached {count}: {:?}",
        pool.stats()
    );
    pool.stats().spare_pids
}

#[test]
fn a_retired_member_is_replaced_by_the_spare_started_before_the_trip() {
    let pool = pool(scripted_worker(), PoolOptions::new().with_max_restarts(3));
    let spare = ready_spares(&pool, 1)[0];
    let first = member_pids(&pool.stats())[0];
    assert_ne!(spare, first);

    let error = pool.eval("retire()").unwrap_err();
    assert_eq!(
        (error.class(), error.code()),
        (ErrorClass::Limit, ErrorCode::ResourceLimit)
    );
    // The tripped worker was retired (reaped) before the answer returned,
    // and the slot took the spare (DESIGN §17.7).
    assert!(leftovers(first).is_empty(), "the retired worker was reaped");
    let stats = pool.stats();
    assert_eq!(member_pids(&stats), vec![spare]);
    assert_eq!(stats.spares_used, 1);
    assert_eq!(
        (stats.totals.retirements, stats.totals.restarts),
        (1, 1),
        "one retirement, one restart on the spare"
    );
    assert_eq!(stats.failures_in_window, 0, "a retirement is no failure");
    assert_eq!(pool.eval("return 8").unwrap(), json!(8));
    assert_eq!(member_pids(&pool.stats()), vec![spare]);
    assert_eq!(pool.stats().totals.invocations, 2, "nothing ran twice");
    let next = ready_spares(&pool, 1)[0];
    assert!(![first, spare].contains(&next));
    assert_eq!(pool.stats().spares_started, 2);
}

#[test]
fn a_worker_that_would_keep_serving_after_a_trip_is_retired_and_no_failure() {
    // SPEC §13.1-a lets a worker keep its VM after a trip; the reference
    // parent never reuses it (DESIGN §17.4), and it is no failure (with a
    // budget of 0 a failure would have quarantined the pool).
    let pool = pool(scripted_worker(), PoolOptions::new().with_max_restarts(0));
    let spare = ready_spares(&pool, 1)[0];
    let first = member_pids(&pool.stats())[0];
    let error = pool.eval("trip()").unwrap_err();
    assert_eq!(error.class(), ErrorClass::Limit, "{error}");
    assert!(
        leftovers(first).is_empty(),
        "killed and reaped before the answer returned"
    );
    assert_eq!(member_pids(&pool.stats()), vec![spare]);
    ready_spares(&pool, 1);
    let stats = pool.stats();
    assert!(!stats.quarantined);
    assert_eq!(stats.failures_in_window, 0);
    assert_eq!((stats.totals.retirements, stats.totals.restarts), (1, 1));
    assert_eq!(pool.eval("return 3").unwrap(), json!(3));
}

#[test]
fn a_crashed_member_restarts_on_the_spare() {
    let pool = pool(scripted_worker(), PoolOptions::new().with_size(2));
    let spare = ready_spares(&pool, 1)[0];
    let members = member_pids(&pool.stats());
    let crashed = pool.eval("crash()").unwrap_err();
    assert_eq!(crashed.class(), ErrorClass::WorkerCrashed);
    // Both members serve again; the crashed one's slot holds the spare.
    for value in [1, 2] {
        assert_eq!(pool.eval(&format!("return {value}")).unwrap(), json!(value));
    }
    let stats = pool.stats();
    let now = member_pids(&stats);
    assert!(now.contains(&spare), "{now:?} lacks the spare {spare}");
    assert_eq!(
        now.iter().filter(|pid| members.contains(pid)).count(),
        1,
        "one member kept its worker: {members:?} -> {now:?}"
    );
    assert_eq!((stats.totals.crashes, stats.totals.restarts), (1, 1));
    assert_eq!(stats.spares_used, 1);
}

#[test]
fn spares_count_in_the_stats_and_serialize() {
    let pool = pool(
        scripted_worker(),
        PoolOptions::new().with_size(2).with_spares(2),
    );
    let pids = ready_spares(&pool, 2);
    let members = member_pids(&pool.stats());
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|pid| !members.contains(pid)));
    let stats = pool.stats();
    assert_eq!(
        (stats.running, stats.spare_capacity, stats.spares_started),
        (2, 2, 2),
        "spares are not members"
    );
    let json = serde_json::to_value(&stats).unwrap();
    for key in [
        "spares",
        "spare_capacity",
        "spare_pids",
        "spares_started",
        "spares_used",
        "spare_failures",
        "spares_paused",
    ] {
        assert!(json.get(key).is_some(), "pool stats lack `{key}`: {json}");
    }
    assert_eq!(json["spares"], 2);
    // Bounded: never more than configured, however long it runs.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pool.stats().spares, 2);
    assert_eq!(pool.stats().spares_started, 2);
}

#[test]
fn spares_are_refused_above_the_maximum() {
    let config = WorkerConfig::new(scripted_worker(), policy(1_000));
    let error =
        WorkerPool::start("too-many", config, PoolOptions::new().with_spares(9)).unwrap_err();
    assert_eq!(error.class(), ErrorClass::InvalidInput, "{error}");
    assert!(error.to_string().contains("spares 9"), "{error}");
}

#[test]
fn spares_are_reaped_on_shutdown_and_on_drop() {
    let pool = pool(scripted_worker(), PoolOptions::new().with_spares(2));
    let spares = ready_spares(&pool, 2);
    let report = pool.shutdown(Duration::from_secs(3));
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.retired, report.spares_retired), (1, 2));
    for pid in &spares {
        assert!(leftovers(*pid).is_empty(), "spare {pid} left something");
    }
    assert_eq!(pool.stats().spares, 0);

    let pool = pool_with_plugin_spare();
    let (host, _scratch) = pool;
    let spare = {
        assert!(eventually(PATIENCE, || host.stats().spares == 1));
        host.stats().spare_pids[0]
    };
    drop(host);
    assert!(leftovers(spare).is_empty(), "spare {spare} left something");
}

/// A plugin host with one spare (which loaded the plugin).
fn pool_with_plugin_spare() -> (PluginHost, Scratch) {
    let scratch = Scratch::new("spare-plugin");
    let path = scratch.write("plugin.lua", &plugin_source("v1"));
    let manifest = PluginManifest::new("spared", &path)
        .with_worker(scripted_worker())
        .with_policy(policy(1_000));
    (PluginHost::start(manifest).unwrap(), scratch)
}

#[test]
fn a_plugin_spare_has_the_plugin_loaded_and_follows_reloads() {
    let (host, scratch) = pool_with_plugin_spare();
    assert!(eventually(PATIENCE, || host.stats().spares == 1));
    let old_spare = host.stats().spare_pids[0];
    scratch.write("plugin.lua", &plugin_source("v2"));
    host.reload().unwrap();
    // The old generation's spare is gone; a spare of generation 2 follows.
    assert!(eventually(PATIENCE, || {
        let stats = host.stats();
        stats.spares == 1 && stats.spare_pids[0] != old_spare
    }));
    assert!(leftovers(old_spare).is_empty());
    let spare = host.stats().spare_pids[0];
    assert_eq!(
        host.eval("crash()").unwrap_err().class(),
        ErrorClass::WorkerCrashed
    );
    assert_eq!(
        host.render_prompt("version", json!({})).unwrap(),
        Some("v2".to_owned()),
        "the spare serves the plugin it loaded in the background"
    );
    assert_eq!(member_pids(&host.stats()), vec![spare]);
}

#[test]
fn a_failed_spare_start_counts_against_the_budget_and_pauses_spares() {
    // A worker command that starts only while a marker file exists.
    let scratch = Scratch::new("spare-failure");
    let marker = scratch.write("marker", "");
    let command = WorkerCommand::new("/bin/sh").arg("-c").arg(format!(
        "[ -e '{}' ] && exec '{}'",
        marker.display(),
        quirl_lua_testkit::bins::scripted_worker().display()
    ));
    let pool = pool(command, PoolOptions::new().with_max_restarts(5));
    ready_spares(&pool, 1);
    std::fs::remove_file(&marker).unwrap();
    assert_eq!(
        pool.eval("crash()").unwrap_err().class(),
        ErrorClass::WorkerCrashed
    );
    // The replacement takes the spare; the keeper's next start fails.
    assert_eq!(pool.eval("return 1").unwrap(), json!(1));
    assert!(eventually(PATIENCE, || pool.stats().spare_failures == 1));
    let stats = pool.stats();
    assert!(stats.spares_paused);
    assert_eq!(stats.failures_in_window, 2, "the crash and the spare start");
    assert_eq!(stats.spares, 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pool.stats().spare_failures, 1, "paused: no retry storm");

    // A restart on the caller's path that works resumes spares.
    scratch.write("marker", "");
    assert_eq!(
        pool.eval("crash()").unwrap_err().class(),
        ErrorClass::WorkerCrashed
    );
    assert_eq!(pool.eval("return 2").unwrap(), json!(2));
    ready_spares(&pool, 1);
    assert!(!pool.stats().spares_paused);
}

#[test]
fn a_spare_start_failure_can_spend_the_budget_and_quarantine() {
    let scratch = Scratch::new("spare-quarantine");
    let marker = scratch.write("marker", "");
    let command = WorkerCommand::new("/bin/sh").arg("-c").arg(format!(
        "[ -e '{}' ] && exec '{}'",
        marker.display(),
        quirl_lua_testkit::bins::scripted_worker().display()
    ));
    let pool = pool(command, PoolOptions::new().with_max_restarts(1));
    ready_spares(&pool, 1);
    std::fs::remove_file(&marker).unwrap();
    pool.eval("crash()").unwrap_err();
    pool.eval("return 1").unwrap();
    assert!(eventually(PATIENCE, || pool.is_quarantined()));
    let stats = pool.stats();
    assert_eq!(stats.spare_failures, 1);
    assert_eq!(stats.spares, 0);
    assert_eq!(
        pool.eval("return 1").unwrap_err().class(),
        ErrorClass::Quarantined
    );
}

#[test]
fn with_no_spares_configured_none_is_started() {
    let pool = pool(scripted_worker(), PoolOptions::new().with_spares(0));
    let first = member_pids(&pool.stats())[0];
    assert_eq!(
        pool.eval("crash()").unwrap_err().class(),
        ErrorClass::WorkerCrashed
    );
    assert_eq!(pool.eval("return 4").unwrap(), json!(4));
    std::thread::sleep(Duration::from_millis(50));
    let stats = pool.stats();
    assert_eq!(
        (
            stats.spares,
            stats.spare_capacity,
            stats.spares_started,
            stats.spares_used
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(stats.totals.restarts, 1);
    assert_ne!(member_pids(&stats), vec![first]);
    let report = pool.shutdown(Duration::from_secs(3));
    assert_eq!(report.spares_retired, 0);
}
