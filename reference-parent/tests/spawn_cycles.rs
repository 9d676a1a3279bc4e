//! 1,000 spawn → eval → kill cycles leave no zombie and no descriptor growth.
//!
//! Uses the fast scripted fake worker (`echo`), so the test measures the
//! parent's own bookkeeping, not Lua start-up. Alone in its test binary so
//! that no concurrent test opens descriptors or children while it counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/procfs.rs"]
mod procfs;

use std::time::{Duration, Instant};

use quirl_lua_reference_parent::{Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig};

fn cycle(config: &WorkerConfig) {
    let mut worker = Worker::spawn(config.clone()).unwrap();
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    drop(worker);
}

#[test]
fn a_thousand_spawn_eval_kill_cycles_leave_no_zombie_and_no_descriptor_growth() {
    let command = WorkerCommand::new(env!("CARGO_BIN_EXE_quirl-lua-fake-worker")).arg("echo");
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    let config = WorkerConfig::new(command, policy).startup_timeout(Duration::from_secs(10));
    // Warm up: anything the runtime opens lazily is in the baseline.
    for _ in 0..5 {
        cycle(&config);
    }
    let fds_before = procfs::fd_count();
    let started = Instant::now();
    for _ in 0..1_000 {
        cycle(&config);
    }
    let elapsed = started.elapsed();
    assert_eq!(procfs::fd_count(), fds_before, "descriptors grew");
    assert!(
        procfs::own_children().is_empty(),
        "children left: {:?}",
        procfs::own_children()
    );
    assert!(procfs::library_threads().is_empty());
    eprintln!(
        "1000 cycles in {elapsed:?} ({:?} per cycle)",
        elapsed / 1_000
    );
}
