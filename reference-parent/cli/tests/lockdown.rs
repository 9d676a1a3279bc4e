//! Worker lockdown (DESIGN §18) through the parent: the real worker is locked down and
//! limited after `initialize`, a worker that makes a forbidden system call
//! dies by SIGSYS and is reported as a crash with nothing left behind, and
//! `--no-lockdown` turns it all off.
//!
//! The probes use the worker's hidden `--lockdown-test-probe=NAME` argument,
//! present in debug builds of `quirl-lua` only; the tests that need it are
//! compiled only in debug builds too.
#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;

use std::time::Duration;

use quirl_lua_reference_parent::rlimits::{ADDRESS_SPACE_MARGIN_BYTES, OPEN_FILES_MAX};
use quirl_lua_reference_parent::{
    ErrorClass, Policy, PolicySettings, WORKER_ARGUMENT, Worker, WorkerCommand, WorkerConfig,
    WorkerLimits,
};
use serde_json::json;

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
const MEMORY: u64 = 16 << 20;

fn policy() -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: MEMORY,
        instruction_limit: 10_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap()
}

fn worker_command(extra: &[&str]) -> WorkerCommand {
    extra.iter().fold(
        WorkerCommand::new(CLI).arg(WORKER_ARGUMENT),
        |command, arg| command.arg(*arg),
    )
}

fn spawn(extra: &[&str]) -> Worker {
    Worker::spawn(WorkerConfig::new(worker_command(extra), policy())).unwrap()
}

/// `Name:\tvalue` lines of `/proc/PID/status`.
fn status_field(pid: u32, name: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
}

/// Soft and hard value of one `/proc/PID/limits` row.
fn limit(pid: u32, row: &str) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(row))
        .unwrap_or_else(|| panic!("no {row} in /proc/{pid}/limits:\n{text}"));
    let mut values = line[row.len()..].split_whitespace();
    (
        values.next().unwrap().to_owned(),
        values.next().unwrap().to_owned(),
    )
}

fn open_descriptors(pid: u32) -> Vec<i32> {
    let mut fds: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

/// Nothing of worker `pid` is left: no living member of its group or
/// session, and no zombie child of ours.
fn assert_nothing_left(pid: u32) {
    let id = i32::try_from(pid).unwrap();
    let living = procfs::living_members_after(id, Duration::from_secs(2));
    assert!(living.is_empty(), "left behind: {living:?}");
    assert!(
        procfs::own_zombies().iter().all(|zombie| zombie.pid != id),
        "worker {pid} was not reaped"
    );
}

#[test]
fn the_worker_is_locked_down_after_initialize() {
    let mut worker = spawn(&[]);
    let pid = worker.pid();
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "Seccomp"), "2");
    assert_eq!(status_field(pid, "Seccomp_filters"), "1");
    // Locked down and still serving.
    assert_eq!(worker.eval("x = 6 * 7 return x").unwrap(), json!(42));
    assert_eq!(
        worker.eval("return #string.rep('a', 3000000)").unwrap(),
        json!(3_000_000)
    );
    worker.shutdown().unwrap();
    assert_nothing_left(pid);
}

#[test]
fn the_worker_runs_under_the_policy_resource_limits() {
    let worker = spawn(&[]);
    let pid = worker.pid();
    let address_space = (2 * MEMORY + ADDRESS_SPACE_MARGIN_BYTES).to_string();
    assert_eq!(
        limit(pid, "Max address space"),
        (address_space.clone(), address_space)
    );
    let zero = ("0".to_owned(), "0".to_owned());
    assert_eq!(limit(pid, "Max core file size"), zero);
    assert_eq!(limit(pid, "Max file size"), zero);
    assert_eq!(limit(pid, "Max processes"), zero);
    let files = OPEN_FILES_MAX.to_string();
    assert_eq!(limit(pid, "Max open files"), (files.clone(), files));
    // Every inherited descriptor beyond stdio is gone; the worker itself
    // moved its frame channel (the stderr pipe) to fd 3 and pointed fds 1
    // and 2 at /dev/null.
    assert_eq!(open_descriptors(pid), vec![0, 1, 2, 3]);
    let target = |fd: i32| {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .unwrap()
            .display()
            .to_string()
    };
    assert!(target(0).starts_with("pipe:"), "{}", target(0));
    assert_eq!(target(1), "/dev/null");
    assert_eq!(target(2), "/dev/null");
    assert!(target(3).starts_with("pipe:"), "{}", target(3));
    drop(worker);
    assert_nothing_left(pid);
}

#[test]
fn the_address_space_margin_holds_the_largest_frame() {
    // A frame just under 5 MiB of tiny JSON values is the worst case the
    // worker must decode before it can refuse anything: about 140 MiB of
    // address space at the smallest useful memory policy.
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 1 << 20,
        instruction_limit: 10_000_000,
        wall_time_ms: 10_000,
    })
    .unwrap();
    let mut worker = Worker::spawn(WorkerConfig::new(worker_command(&[]), policy)).unwrap();
    let context = serde_json::Value::Array(vec![json!(0); 2_600_000]);
    let error = worker.render_prompt("missing", context).unwrap_err();
    assert_eq!(error.class(), ErrorClass::Guest, "{error:?}");
    assert_eq!(worker.eval("return 1").unwrap(), json!(1));
}

#[cfg(debug_assertions)]
#[test]
fn forbidden_system_calls_kill_the_worker_with_sigsys() {
    for probe in [
        "execve",
        "socket",
        "open",
        "fork",
        "mprotect-exec",
        "mmap-exec",
        "write-stdout",
    ] {
        let mut worker = spawn(&[&format!("--lockdown-test-probe={probe}")]);
        let pid = worker.pid();
        let error = worker.eval("return 1").unwrap_err();
        assert_eq!(
            error.class(),
            ErrorClass::WorkerCrashed,
            "{probe}: {error:?}"
        );
        assert_eq!(error.code().as_str(), "lua");
        let context = error.record().context.join("\n");
        assert!(
            context.contains(&format!("worker {pid} was killed by signal 31 (SIGSYS")),
            "{probe}: {context}"
        );
        assert!(worker.is_poisoned());
        assert_nothing_left(pid);
        // The next call runs on a fresh worker (DESIGN §17.4), which the
        // same probe kills the same way.
        let again = worker.eval("return 1").unwrap_err();
        assert_eq!(again.class(), ErrorClass::WorkerCrashed, "{probe}");
        assert_ne!(worker.pid(), pid);
        let fresh = worker.pid();
        drop(worker);
        assert_nothing_left(fresh);
    }
}

#[cfg(debug_assertions)]
#[test]
fn abort_and_panic_are_crashes_named_for_what_they_are() {
    for (probe, expected) in [
        ("abort", "was killed by signal 6 (SIGABRT)"),
        ("segfault", "was killed by signal 11 (SIGSEGV)"),
        ("stack-overflow", "was killed by signal 6 (SIGABRT)"),
        ("panic", "exited with status 101"),
    ] {
        let mut worker = spawn(&[&format!("--lockdown-test-probe={probe}")]);
        let pid = worker.pid();
        let error = worker.eval("return 1").unwrap_err();
        let context = error.record().context.join("\n");
        assert!(
            matches!(
                error.class(),
                ErrorClass::WorkerCrashed | ErrorClass::ProtocolViolation
            ),
            "{probe}: {error:?}"
        );
        assert!(context.contains(expected), "{probe}: {context}");
        assert!(!context.contains("SIGSYS"), "{probe}: {context}");
        assert_nothing_left(pid);
    }
}

#[cfg(debug_assertions)]
#[test]
fn no_lockdown_switches_the_filter_and_the_limits_off() {
    let config = WorkerConfig::new(
        worker_command(&["--no-lockdown", "--lockdown-test-probe=execve"]),
        policy(),
    )
    .with_limits(WorkerLimits::unlimited());
    let mut worker = Worker::spawn(config).unwrap();
    let pid = worker.pid();
    // The probe's execve of a missing program just fails with ENOENT.
    assert_eq!(worker.eval("return 1").unwrap(), json!(1));
    assert_eq!(status_field(pid, "Seccomp"), "0");
    assert_ne!(limit(pid, "Max core file size").1, "0".to_owned());
    worker.shutdown().unwrap();
    assert_nothing_left(pid);
}

#[cfg(debug_assertions)]
#[test]
fn the_cli_passes_no_lockdown_to_the_worker() {
    let run = |no_lockdown: bool| {
        let mut command = std::process::Command::new(CLI);
        command.env(
            "QUIRL_LUA_WORKER",
            format!("{CLI} {WORKER_ARGUMENT} --lockdown-test-probe=socket"),
        );
        if no_lockdown {
            command.arg("--no-lockdown");
        }
        command.args(["eval", "return 7"]).output().unwrap()
    };
    let locked = run(false);
    assert_eq!(locked.status.code(), Some(4), "{locked:?}");
    assert!(
        String::from_utf8_lossy(&locked.stderr).contains("SIGSYS"),
        "{locked:?}"
    );
    let open = run(true);
    assert_eq!(open.status.code(), Some(0), "{open:?}");
    assert_eq!(String::from_utf8_lossy(&open.stdout).trim(), "7");
}

/// DESIGN §18.3 step 4: the built-in worker (the CLI in worker mode) enters
/// its Landlock domain after `initialize`; the `landlock-open` probe, which
/// skips the seccomp filter, finds `/dev/null` refused and exits with the
/// probe's "denied" status, which the parent reports as the crash it is.
#[cfg(debug_assertions)]
#[test]
fn the_worker_reaches_no_file_through_its_landlock_domain() {
    use quirl_lua_reference_worker::lockdown::probe::{LANDLOCK_DENIED_EXIT, LANDLOCK_OPENED_EXIT};
    let expected = match quirl_lua_reference_worker::lockdown::landlock::kernel_abi() {
        Ok(_) => LANDLOCK_DENIED_EXIT,
        Err(why) => {
            quirl_lua_testkit::environment::skip("landlock", "the Landlock half", why);
            LANDLOCK_OPENED_EXIT
        }
    };
    let mut worker = spawn(&["--lockdown-test-probe=landlock-open"]);
    let pid = worker.pid();
    let error = worker.eval("return 1").unwrap_err();
    assert_eq!(error.class(), ErrorClass::WorkerCrashed, "{error:?}");
    let context = error.record().context.join("\n");
    assert!(
        context.contains(&format!("exited with status {expected}")),
        "{context}"
    );
    assert_nothing_left(pid);
    // The CLI reports the domain with the seccomp mode.
    let output = std::process::Command::new(CLI)
        .args(["--version", "--verbose"])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "worker lockdown: {}\n",
            quirl_lua_reference_worker::lockdown::summary()
        )),
        "{text}"
    );
}
