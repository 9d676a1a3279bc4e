//! Shutdown of a plugin host with busy and idle members leaves no process
//! and no thread (DESIGN §17.4, §17.7), with the scripted double and with the real worker.
//! One test, alone in its test binary, so that it can count this process's
//! children and threads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;
#[path = "support/lifecycle.rs"]
mod support;

use std::time::Duration;

use quirl_lua_reference_parent::lifecycle::{PluginHost, PluginManifest, PoolOptions};
use quirl_lua_reference_parent::{ErrorClass, WorkerCommand};
use serde_json::json;

use support::{
    Scratch, eventually, leftovers, member_pids, plugin_source, policy, scripted_worker,
};

#[test]
fn shutdown_of_a_host_with_busy_members_leaves_no_process_or_thread() {
    let real = support::reference_worker();
    for worker in [scripted_worker(), real] {
        check_shutdown(worker);
    }
}

fn check_shutdown(worker: WorkerCommand) {
    let threads_before = procfs::thread_count();
    let scratch = Scratch::new("shutdown");
    let path = scratch.write("plugin.lua", &plugin_source("v1"));
    let manifest = PluginManifest::new("busy", &path)
        .with_worker(worker.clone())
        .with_policy(policy(30_000))
        .with_pool(PoolOptions::new().with_size(4).with_queue_capacity(8));
    let host = PluginHost::start(manifest).unwrap();
    let mut pids = member_pids(&host.stats());
    assert_eq!(pids.len(), 4);
    // The default warm spare (DESIGN §17.7) is reaped too.
    assert!(eventually(Duration::from_secs(10), || host.stats().spares == 1));
    pids.extend(host.stats().spare_pids);

    let report = std::thread::scope(|scope| {
        // Two members spin (far longer than the test); two stay idle.
        let busy: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| host.eval("while true do end")))
            .collect();
        assert!(eventually(Duration::from_secs(5), || host.stats().busy == 2));
        let report = host.shutdown(Duration::from_secs(3));
        for call in busy {
            let error = call.join().unwrap().unwrap_err();
            assert_eq!(error.class(), ErrorClass::Cancelled, "{error}");
        }
        report
    });
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.cancelled, report.retired), (2, 2));
    assert_eq!(report.spares_retired, 1);
    assert!(report.elapsed < Duration::from_secs(3), "{report:?}");

    // Nothing of any worker is left, zombies included, and no thread.
    for pid in &pids {
        assert!(leftovers(*pid).is_empty(), "worker {pid} left something");
    }
    assert!(
        procfs::own_children().is_empty(),
        "{:?}",
        procfs::own_children()
    );
    assert!(
        procfs::library_threads().is_empty(),
        "{:?}",
        procfs::library_threads()
    );
    assert_eq!(procfs::thread_count(), threads_before);

    // Later calls are refused at once.
    let error = host.render_prompt("version", json!({})).unwrap_err();
    assert_eq!(error.class(), ErrorClass::Unavailable);
    let stats = host.stats();
    assert_eq!((stats.running, stats.busy), (0, 0));
    assert_eq!(stats.totals.cancellations, 2);
    assert!(
        !stats.quarantined,
        "host cancellations do not spend the budget"
    );
    drop(host);

    // Dropping a host that was never shut down does the same.
    let manifest = PluginManifest::new("dropped", &path)
        .with_worker(worker)
        .with_policy(policy(30_000))
        .with_pool_size(3);
    let host = PluginHost::start(manifest).unwrap();
    let mut pids = member_pids(&host.stats());
    assert!(eventually(Duration::from_secs(10), || host.stats().spares == 1));
    pids.extend(host.stats().spare_pids);
    drop(host);
    for pid in &pids {
        assert!(leftovers(*pid).is_empty(), "worker {pid} left something");
    }
    assert!(procfs::own_children().is_empty());
    assert_eq!(procfs::thread_count(), threads_before);
}
