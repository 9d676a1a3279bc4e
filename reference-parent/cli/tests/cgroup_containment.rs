//! Containment of descendants that start their own session (DESIGN §16.7,
//! §17.2, §17.3): nothing a worker or host command starts outlives it, and
//! the call returns when its own command exits. Where each host command is
//! the init of a PID namespace of its own (`pid_namespace_support`), the
//! kernel kills such a descendant with its command in both modes; without
//! one, cgroup mode kills it and reports the escape, and forced
//! process-group mode keeps the documented gap.
//!
//! Cgroup tests need a writable cgroup v2 hierarchy (root in CI); where
//! there is none they print why and return.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    Environment, ErrorCode, Grants, ProcessAccess, ProcessHostConfig, ProcessRequest,
    pid_namespace_support, run_command,
};
use quirl_lua_reference_parent::{Containment, containment_report};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

/// The parent's own cgroup, or `None` (with the reason printed) when this
/// machine has no writable cgroup v2 hierarchy.
fn own_cgroup(test: &str) -> Option<PathBuf> {
    let report = containment_report(Containment::Auto);
    match report.cgroup {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            quirl_lua_testkit::environment::skip(
                "cgroup",
                test,
                &format!(
                    "no writable cgroup v2 hierarchy here ({})",
                    report.summary()
                ),
            );
            None
        }
    }
}

/// A sleep duration unique to this test and process, to find its sleeper.
/// A `sleep` argument (about a minute) no other test or process uses:
/// `cargo test` runs this file's tests as threads of one process, so a
/// counter tells them apart where the process id does not (two tests once
/// shared a fixed salt, and each saw the other's live escapee as its own).
fn marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "61.{:06}{:03}",
        std::process::id() % 1_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Living (non-zombie) processes whose argument vector contains `argument`.
fn living_with_argument(argument: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !cmdline
            .split(|b| *b == 0)
            .any(|word| word == argument.as_bytes())
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let state = stat[stat.rfind(')').unwrap() + 2..].chars().next();
        if !matches!(state, Some('Z' | 'X')) {
            found.push(pid);
        }
    }
    found
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        // SAFETY: kill with integer arguments; the pids were just found
        // running this test's unique marker.
        unsafe { libc::kill(pid.cast_signed(), libc::SIGKILL) };
    }
}

/// Child cgroup directories under `dir`.
fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default()
}

fn host(containment: Containment) -> ProcessHostConfig {
    ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn"]).unwrap(),
        Environment::empty().with("PATH", "/usr/bin:/bin").unwrap(),
        "/",
    )
    .unwrap()
    .with_containment(containment)
}

fn run(
    config: &ProcessHostConfig,
    command: &str,
    deadline: Duration,
) -> (
    Duration,
    Result<String, quirl_lua_reference_parent::process_host::HostError>,
) {
    let request = ProcessRequest {
        command: command.to_owned(),
        deadline: Instant::now() + deadline,
        max_output_bytes: 4096,
    };
    let started = Instant::now();
    let result = run_command(config, &request, &Cancel::new()).map(|outcome| outcome.stdout);
    (started.elapsed(), result)
}

#[test]
fn a_double_forked_setsid_host_command_is_contained_by_its_cgroup() {
    let Some(own) = own_cgroup("a_double_forked_setsid_host_command_is_contained_by_its_cgroup")
    else {
        return;
    };
    let sleep = marker();
    let deadline = Duration::from_secs(30);
    let (elapsed, result) = run(
        &host(Containment::Cgroup),
        &format!("setsid -w -f setsid -f sleep {sleep}"),
        deadline,
    );
    // The call returns when its own command exits, not at the deadline:
    // the escapee held both output pipes until it was killed.
    assert!(elapsed < deadline / 2, "took {elapsed:?}");
    if pid_namespace_support().is_ok() {
        // DESIGN §16.7: the escapee was in the command's PID namespace,
        // killed by the kernel when the command ended; nothing escaped.
        assert_eq!(result.unwrap(), "");
    } else {
        let error = result.unwrap_err();
        assert_eq!(error.code(), ErrorCode::ResourceLimit, "{error:?}");
        assert_eq!(
            error.message(),
            "command left processes running outside its session"
        );
        assert!(
            error
                .context()
                .iter()
                .any(|line| line.starts_with("escape contained: 1 process")),
            "{:?}",
            error.context()
        );
        assert_eq!(error.exit_status(), Some(0));
    }
    assert!(
        living_with_argument(&sleep).is_empty(),
        "the escapee survived"
    );
    let left: Vec<PathBuf> = child_cgroups(&own)
        .into_iter()
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("command-"))
        })
        .collect();
    // Other tests of this binary may be running their own commands; none
    // of them lives longer than a few seconds.
    let waited = Instant::now();
    let mut left = left;
    while left.iter().any(|path| path.exists()) && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        left.retain(|path| path.exists());
    }
    assert!(
        left.iter().all(|path| !path.exists()),
        "cgroups left: {left:?}"
    );
}

#[test]
fn a_host_command_runs_inside_a_cgroup_of_its_own() {
    let Some(own) = own_cgroup("a_host_command_runs_inside_a_cgroup_of_its_own") else {
        return;
    };
    let (_, result) = run(
        &host(Containment::Cgroup),
        "sed -n s/^0:://p /proc/self/cgroup",
        Duration::from_secs(10),
    );
    let path = PathBuf::from(result.unwrap().trim());
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("command-"), "{path:?}");
    assert!(
        own.ends_with(path.parent().unwrap().strip_prefix("/").unwrap()),
        "{own:?} vs {path:?}"
    );
    // Gone after the call.
    assert!(!own.join(&name).exists());
}

#[test]
fn in_process_group_mode_a_setsid_escapee_dies_with_its_pid_namespace() {
    // DESIGN §16.7: the escapee cannot leave the command's PID namespace,
    // so the kernel kills it when the command ends.
    let test = "in_process_group_mode_a_setsid_escapee_dies_with_its_pid_namespace";
    if let Err(why) = pid_namespace_support() {
        quirl_lua_testkit::environment::skip("pid-namespace", test, why);
        return;
    }
    let sleep = marker();
    let deadline = Duration::from_secs(30);
    let (elapsed, result) = run(
        &host(Containment::ProcessGroup),
        &format!("setsid -w -f setsid -f sleep {sleep}"),
        deadline,
    );
    assert_eq!(result.unwrap(), "");
    assert!(elapsed < deadline / 2, "took {elapsed:?}");
    assert!(
        living_with_argument(&sleep).is_empty(),
        "the escapee survived"
    );
}

#[test]
fn in_process_group_mode_without_a_pid_namespace_a_setsid_escapee_is_the_documented_gap() {
    // DESIGN §17.3: process groups cannot hold a descendant that starts its
    // own session after being orphaned; it keeps the output pipes, so the
    // call ends at its deadline. Everything in the command's session is
    // still killed (tests/process_host.rs).
    if pid_namespace_support().is_ok() {
        eprintln!(
            "not applicable: host commands run in PID namespaces here (the gap is closed, see the test above)"
        );
        return;
    }
    let sleep = marker();
    let deadline = Duration::from_millis(1_500);
    let (elapsed, result) = run(
        &host(Containment::ProcessGroup),
        &format!("setsid -w -f setsid -f sleep {sleep}"),
        deadline,
    );
    let error = result.unwrap_err();
    assert_eq!(
        error.message(),
        "command exceeded its deadline",
        "{error:?}"
    );
    assert!(elapsed >= deadline, "{elapsed:?}");
    assert!(
        !error.context().iter().any(|line| line.contains("cgroup")),
        "{:?}",
        error.context()
    );
    let escaped = living_with_argument(&sleep);
    eprintln!("process-group mode: the escapee {escaped:?} survived the call, as documented");
    assert_eq!(escaped.len(), 1, "expected the one documented escapee");
    kill_all(&escaped);
}

fn quirl_lua(args: &[&str]) -> Output {
    Command::new(CLI)
        .args(args)
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `--worker` line: a shell that double-forks a session leader, records its
/// own cgroup in `record`, then becomes the real worker.
fn escaping_worker(sleep: &str, record: &Path) -> String {
    format!(
        "/bin/sh -c 'setsid -f sleep {sleep}; sed -n s/^0:://p /proc/self/cgroup > {}; exec {CLI} --internal-lua-worker-v1'",
        record.display()
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("{name}-{}", std::process::id()))
}

#[test]
fn a_worker_command_that_escapes_its_session_leaves_nothing_after_quirl_lua_exits() {
    let Some(_) = own_cgroup(
        "a_worker_command_that_escapes_its_session_leaves_nothing_after_quirl_lua_exits",
    ) else {
        return;
    };
    let sleep = marker();
    let record = scratch("worker-cgroup");
    let worker = escaping_worker(&sleep, &record);
    let output = quirl_lua(&[
        "--containment",
        "cgroup",
        "--worker",
        &worker,
        "eval",
        "return 6 * 7",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "42");
    assert!(
        living_with_argument(&sleep).is_empty(),
        "the escapee survived quirl-lua"
    );
    // The worker ran in `…/quirl-lua-<pid>-<start>/worker-1`, and that
    // whole parent cgroup is gone now.
    let path = PathBuf::from(std::fs::read_to_string(&record).unwrap().trim());
    let _ = std::fs::remove_file(&record);
    assert_eq!(path.file_name().unwrap(), "worker-1", "{path:?}");
    let own_name = path
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(own_name.starts_with("quirl-lua-"), "{path:?}");
    let report = containment_report(Containment::Auto);
    let ours = PathBuf::from(report.cgroup.unwrap());
    let sibling = ours.parent().unwrap().join(&own_name);
    assert!(!sibling.exists(), "{sibling:?} survived quirl-lua");
}

// DESIGN §16.7, §17.3: `quirl-lua` adopts orphans and ends them before it
// exits, so in process-group mode a worker's escapee no longer survives.
#[test]
fn in_process_group_mode_a_worker_escapee_is_ended_at_exit() {
    let sleep = marker();
    let record = scratch("worker-pgroup");
    let worker = escaping_worker(&sleep, &record);
    let started = Instant::now();
    let output = quirl_lua(&[
        "--containment",
        "process-group",
        "--worker",
        &worker,
        "eval",
        "return 6 * 7",
    ]);
    let _ = std::fs::remove_file(&record);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "42");
    // Today's guarantee: quirl-lua still exits (the escapee holding the
    // response pipe costs at most the pipe-release wait) ...
    assert!(started.elapsed() < Duration::from_secs(20));
    // ... and the escapee, reparented to quirl-lua, was ended at its exit.
    let escaped = living_with_argument(&sleep);
    kill_all(&escaped);
    assert!(escaped.is_empty(), "survived quirl-lua: {escaped:?}");
}

#[test]
fn forced_cgroup_mode_without_cgroup_v2_fails_and_auto_falls_back() {
    // Only meaningful where cgroup v2 is unavailable; elsewhere, assert the
    // mode the diagnostics report instead.
    let report = containment_report(Containment::Auto);
    if report.cgroup.is_some() {
        assert_eq!(report.mode, "cgroup");
        let output = quirl_lua(&["--version", "--verbose"]);
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("containment: cgroup\n"), "{text}");
        let output = quirl_lua(&["--version", "--verbose", "--containment", "process-group"]);
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("containment: process-group\n"), "{text}");
        return;
    }
    let (_, result) = run(&host(Containment::Cgroup), "true", Duration::from_secs(5));
    let error = result.unwrap_err();
    assert!(error.message().contains("cgroup"), "{error:?}");
    let (_, result) = run(&host(Containment::Auto), "true", Duration::from_secs(5));
    assert!(result.is_ok());
}

#[test]
fn json_errors_and_stats_say_which_containment_is_in_effect() {
    let automatic = if containment_report(Containment::Auto).cgroup.is_some() {
        "cgroup v2"
    } else {
        "process-group"
    };
    for (mode, expected) in [("process-group", "process-group"), ("auto", automatic)] {
        let output = quirl_lua(&["--json", "--containment", mode, "eval", "error('x')"]);
        let record: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let context = record["error"]["context"].as_array().unwrap();
        assert!(
            context.iter().any(|line| line
                .as_str()
                .unwrap()
                .starts_with(&format!("containment: {expected}"))),
            "{record}"
        );
    }
    let mut child = Command::new(CLI)
        .args(["--containment", "process-group", "stats"])
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(b"{\"eval\":\"return 1\"}\n").unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(stats["containment"]["mode"], "process-group", "{stats}");
    assert_eq!(
        stats["containment"]["requested"], "process-group",
        "{stats}"
    );
}

#[test]
fn a_stale_cgroup_of_a_crashed_parent_is_removed_by_the_next_parent() {
    let Some(own) = own_cgroup("a_stale_cgroup_of_a_crashed_parent_is_removed_by_the_next_parent")
    else {
        return;
    };
    // Named after this process but with a start time it does not have:
    // its "creator" is gone (a reused pid is not the creator).
    let stale = own
        .parent()
        .unwrap()
        .join(format!("quirl-lua-{}-1", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::create_dir(stale.join("worker-7")).unwrap();
    // A live cgroup of another running parent (this test process) must stay.
    assert!(own.exists());
    let output = quirl_lua(&["--version", "--verbose"]);
    let text = String::from_utf8_lossy(&output.stdout);
    // (Another parent started by a concurrent test may have swept it first.)
    assert!(!stale.exists(), "stale cgroup kept: {text}");
    assert!(own.exists(), "a live parent's cgroup was removed");
}

#[test]
fn a_grant_of_a_command_runner_is_refused_and_the_unscoped_grant_still_allows_it() {
    // DESIGN §16.2: `process.spawn:setsid` would grant every program.
    let output = quirl_lua(&[
        "--allow-process",
        "--grant",
        "process.spawn:setsid",
        "eval",
        "return 1",
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("grant `process.spawn:setsid` would grant every program"),
        "{text}"
    );
    assert!(text.contains("`process.spawn`"), "{text}");
    // The unscoped grant allows it (here a foreground `setsid -w`, which
    // leaves nothing behind and so succeeds in either mode).
    for mode in ["auto", "process-group"] {
        let output = quirl_lua(&[
            "--allow-process",
            "--grant",
            "process.spawn",
            "--containment",
            mode,
            "eval",
            "return quirl.process.run('setsid -w echo hi').status",
        ]);
        assert!(output.status.success(), "{mode}: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "0",
            "{mode}"
        );
    }
}

/// The cgroup2 mount point, from the parent's own cgroup directory and this
/// process's cgroup path (`0::/…`).
fn mount_point(own: &Path) -> PathBuf {
    let membership = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let current = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .unwrap()
        .trim_start_matches('/');
    let mut mount = own.parent().unwrap().to_path_buf();
    for _ in Path::new(current).components() {
        mount.pop();
    }
    mount
}

#[test]
fn a_parent_killed_with_sigkill_leaves_a_cgroup_the_next_parent_removes() {
    let Some(own) =
        own_cgroup("a_parent_killed_with_sigkill_leaves_a_cgroup_the_next_parent_removes")
    else {
        return;
    };
    // A worker stuck in Lua with a long deadline, under a parent that is
    // then killed without any chance to clean up (a crash).
    let mut parent = Command::new(CLI)
        .args([
            "--containment",
            "cgroup",
            "--wall-time-ms",
            "60000",
            "eval",
            // Outlasts the test's search for it: its budget takes ~1 s of
            // CPU (collections charged by the heap), not ~0.25 s as a
            // plain `while true do end` does.
            "local t = {} for i = 1, 300000 do t[i] = {} end while true do collectgarbage() end",
        ])
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("quirl-lua-{}-", parent.id());
    let worker_cgroup = {
        let started = Instant::now();
        loop {
            let found = std::fs::read_dir(own.parent().unwrap())
                .unwrap()
                .flatten()
                .find(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
                .map(|entry| entry.path().join("worker-1"));
            if let Some(path) = found.filter(|path| path.join("cgroup.procs").exists()) {
                let members =
                    std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
                if !members.trim().is_empty() {
                    break path;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the worker never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let worker: u32 = std::fs::read_to_string(worker_cgroup.join("cgroup.procs"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    parent.kill().unwrap();
    parent.wait().unwrap();
    assert!(worker_cgroup.exists(), "nothing was left to clean up");
    // The next parent's start sweeps it: worker killed, cgroups removed.
    let output = quirl_lua(&["--version", "--verbose"]);
    assert!(output.status.success());
    assert!(
        !worker_cgroup.exists(),
        "{worker_cgroup:?} survived the next parent"
    );
    assert!(!worker_cgroup.parent().unwrap().exists());
    let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap_or_default();
    let alive = stat
        .rfind(')')
        .and_then(|close| stat[close + 2..].chars().next())
        .is_some_and(|state| !matches!(state, 'Z' | 'X'));
    assert!(!alive, "worker {worker} survived: {stat}");
}

#[test]
fn child_cgroups_carry_the_configured_limits_where_the_controllers_are_enabled() {
    let Some(own) =
        own_cgroup("child_cgroups_carry_the_configured_limits_where_the_controllers_are_enabled")
    else {
        return;
    };
    let report = containment_report(Containment::Auto);
    if !report.controllers.contains(&"pids") {
        quirl_lua_testkit::environment::skip(
            "cgroup-controllers",
            "the pids.max check",
            &format!(
                "the pids controller is not enabled ({})",
                report.notes.join("; ")
            ),
        );
    } else {
        let config = host(Containment::Cgroup).with_command_pids_max(Some(17));
        let command = format!(
            "sh -c 'cat \"$0$(sed -n s/^0:://p /proc/self/cgroup)/pids.max\"' {}",
            mount_point(&own).display()
        );
        let (_, result) = run(&config, &command, Duration::from_secs(10));
        assert_eq!(result.unwrap().trim(), "17");
    }
    if !report.controllers.contains(&"memory") {
        quirl_lua_testkit::environment::skip(
            "cgroup-controllers",
            "the memory.max check",
            &format!(
                "the memory controller is not enabled ({})",
                report.notes.join("; ")
            ),
        );
        return;
    }
    // `--memory 8MiB`: memory.max = 2 × 8 MiB + 256 MiB (DESIGN §17.2).
    let record = scratch("worker-memory-max");
    let worker = format!(
        "/bin/sh -c 'cat \"{}$(sed -n s/^0:://p /proc/self/cgroup)/memory.max\" > {}; exec {CLI} --internal-lua-worker-v1'",
        mount_point(&own).display(),
        record.display()
    );
    let output = quirl_lua(&["--memory", "8MiB", "--worker", &worker, "eval", "return 1"]);
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&record).unwrap();
    let _ = std::fs::remove_file(&record);
    assert_eq!(text.trim(), ((16_u64 << 20) + (256 << 20)).to_string());
}
