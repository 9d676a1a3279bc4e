//! 1,000 spawn → eval → kill cycles, in each containment mode (DESIGN §17.2,
//! §17.3), leave no zombie, no descriptor growth and — in cgroup mode — no
//! cgroup directory and no process in the parent's cgroup.
//!
//! Uses the fast scripted fake worker (`echo`), so the test measures the
//! parent's own bookkeeping, not Lua start-up. Alone in its test binary so
//! that no concurrent test opens descriptors or children while it counts;
//! the two modes run one after the other in the one test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;

use std::time::{Duration, Instant};

use std::path::{Path, PathBuf};

use quirl_lua_reference_parent::{
    Containment, Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig, containment_report,
};

fn cycle(config: &WorkerConfig) {
    let mut worker = Worker::spawn(config.clone()).unwrap();
    let expected = match config.containment() {
        Containment::ProcessGroup => "process-group",
        _ => "cgroup",
    };
    assert_eq!(worker.containment_mode(), expected);
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    drop(worker);
}

/// Child cgroup directories of `own`, and every pid in `own`'s subtree.
fn cgroup_leftovers(own: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let mut directories = Vec::new();
    let mut pids: Vec<String> = std::fs::read_to_string(own.join("cgroup.procs"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    for entry in std::fs::read_dir(own).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            if let Ok(text) = std::fs::read_to_string(entry.path().join("cgroup.procs")) {
                pids.extend(text.lines().map(str::to_owned));
            }
            directories.push(entry.path());
        }
    }
    (directories, pids)
}

fn thousand_cycles(containment: Containment) {
    let command = WorkerCommand::new(quirl_lua_testkit::bins::fake_worker()).arg("echo");
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    let config = WorkerConfig::new(command, policy)
        .with_startup_timeout(Duration::from_secs(10))
        .with_containment(containment);
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
    assert_eq!(
        procfs::fd_count(),
        fds_before,
        "{containment}: descriptors grew"
    );
    assert!(
        procfs::own_children().is_empty(),
        "{containment}: children left: {:?}",
        procfs::own_children()
    );
    assert!(procfs::library_threads().is_empty());
    if containment == Containment::Cgroup {
        let own = PathBuf::from(containment_report(containment).cgroup.unwrap());
        let (directories, pids) = cgroup_leftovers(&own);
        assert!(directories.is_empty(), "cgroups left: {directories:?}");
        assert!(pids.is_empty(), "processes left in the cgroup: {pids:?}");
    }
    eprintln!(
        "{containment}: 1000 cycles in {elapsed:?} ({:?} per cycle)",
        elapsed / 1_000
    );
    failed_spawns_leave_nothing(containment, &policy);
}

/// Spawns that fail inside the child (a missing working directory: the
/// chdir step; a missing program: exec) report the OS error and leave no
/// zombie, descriptor, cgroup or process (DESIGN §17.2).
fn failed_spawns_leave_nothing(containment: Containment, policy: &Policy) {
    let command = WorkerCommand::new(quirl_lua_testkit::bins::fake_worker()).arg("echo");
    let config =
        |command: WorkerCommand| WorkerConfig::new(command, *policy).with_containment(containment);
    let no_dir = config(command.current_dir("/nonexistent/quirl-spawn-cycles"));
    let no_program = config(WorkerCommand::new("/nonexistent/quirl-spawn-cycles"));
    let fds_before = procfs::fd_count();
    for _ in 0..100 {
        for failing in [&no_dir, &no_program] {
            let Err(error) = Worker::spawn(failing.clone()) else {
                panic!("{containment}: a failing spawn succeeded");
            };
            assert!(
                error.to_string().contains("No such file or directory"),
                "{containment}: {error}"
            );
        }
    }
    assert_eq!(
        procfs::fd_count(),
        fds_before,
        "{containment}: descriptors grew after failed spawns"
    );
    assert!(
        procfs::own_children().is_empty(),
        "{containment}: children left after failed spawns: {:?}",
        procfs::own_children()
    );
    if containment == Containment::Cgroup {
        let own = PathBuf::from(containment_report(containment).cgroup.unwrap());
        let (directories, pids) = cgroup_leftovers(&own);
        assert!(directories.is_empty(), "cgroups left: {directories:?}");
        assert!(pids.is_empty(), "processes left in the cgroup: {pids:?}");
    }
}

#[test]
fn a_thousand_spawn_eval_kill_cycles_per_mode_leave_no_zombie_descriptor_cgroup_or_process() {
    // DESIGN §17.4-a: a killed worker leaves nothing.
    thousand_cycles(Containment::ProcessGroup);
    let report = containment_report(Containment::Auto);
    if report.cgroup.is_none() {
        quirl_lua_testkit::environment::skip(
            "cgroup",
            "the cgroup half",
            &format!(
                "no writable cgroup v2 hierarchy here ({})",
                report.summary()
            ),
        );
        return;
    }
    thousand_cycles(Containment::Cgroup);
}
