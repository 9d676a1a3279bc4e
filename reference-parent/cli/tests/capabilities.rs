//! Least privilege (issue 38): the reference worker answers `initialize`
//! holding no capability (DESIGN §18.3), and a host command starts with
//! none either (DESIGN §16.6), even when `quirl-lua` runs as root — read
//! from `/proc/<pid>/status`. Where this test process holds `CAP_SETPCAP`
//! (root) the bounding sets are empty too; without it there is nothing to
//! drop, and the sets are checked to hold nothing this process lacks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    Environment, Grants, ProcessAccess, ProcessHostConfig, ProcessRequest, run_command,
};
use quirl_lua_reference_parent::{
    Policy, PolicySettings, WORKER_ARGUMENT, Worker, WorkerCommand, WorkerConfig,
};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

/// The capability lines of a `/proc/PID/status` text, as numbers.
fn capability_sets(status: &str) -> [(String, u64); 5] {
    ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"].map(|name| {
        let value = status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {name} in {status}"));
        (
            name.to_owned(),
            u64::from_str_radix(value.trim(), 16).unwrap(),
        )
    })
}

/// Whether this process may empty a bounding set (it holds `CAP_SETPCAP`).
fn may_drop_bounding_set() -> bool {
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let effective = capability_sets(&own)[2].1;
    effective & (1 << 8) != 0
}

fn assert_no_capability(status: &str, what: &str) {
    for (name, value) in capability_sets(status) {
        if name == "CapBnd" && !may_drop_bounding_set() {
            continue;
        }
        assert_eq!(value, 0, "{what}: {name} is {value:#x}\n{status}");
    }
}

#[test]
fn the_worker_answers_initialize_holding_no_capability() {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 16 << 20,
        instruction_limit: 1_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    let mut worker = Worker::spawn(WorkerConfig::new(
        WorkerCommand::new(CLI).arg(WORKER_ARGUMENT),
        policy,
    ))
    .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", worker.pid())).unwrap();
    assert_no_capability(&status, "the worker");
    // And it still serves.
    assert_eq!(worker.eval("return 6 * 7").unwrap(), serde_json::json!(42));
    worker.shutdown().unwrap();
    // The worker's own report says so.
    let report = std::process::Command::new(CLI)
        .args([WORKER_ARGUMENT, "--lockdown-report"])
        .output()
        .unwrap();
    let report = String::from_utf8(report.stdout).unwrap();
    assert!(
        report.contains("\ncapabilities: every capability dropped"),
        "{report}"
    );
    let verbose = std::process::Command::new(CLI)
        .args(["--version", "--verbose"])
        .output()
        .unwrap();
    let verbose = String::from_utf8(verbose.stdout).unwrap();
    assert!(
        verbose.contains("worker lockdown: no_new_privs + no capabilities"),
        "{verbose}"
    );
}

#[test]
fn a_host_command_starts_with_no_capability() {
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn:cat"]).unwrap(),
        Environment::empty().with("PATH", "/usr/bin:/bin").unwrap(),
        "/",
    )
    .unwrap();
    let outcome = run_command(
        &config,
        &ProcessRequest {
            command: "cat /proc/self/status".to_owned(),
            deadline: Instant::now() + Duration::from_secs(10),
            max_output_bytes: 64 * 1024,
        },
        &Cancel::new(),
    )
    .unwrap();
    assert_no_capability(&outcome.stdout, "the host command");
}
