//! What a host command may do besides running its one program (DESIGN
//! §16.5–§16.8, issue 38): it writes only beneath its working directory
//! and its private directory (a granted `git` cannot change the operator's
//! `~/.gitconfig` or any file outside its working directory, and still
//! works in its repository); `PATH` lookup skips what it could write; it
//! cannot signal `quirl-lua`; nothing it starts survives `quirl-lua` —
//! not a process that moves itself to another cgroup, not a chain that
//! forks, exits and calls `setsid` every generation (100 runs in each
//! containment mode); and its process limit is enforced or the command is
//! refused, never ignored.
//!
//! `.ci/run` installs `git` and `python3` and then requires them
//! (`QUIRL_TEST_REQUIRE=…,programs`); elsewhere a test without them skips,
//! saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    CommandOutcomeData, Environment, ErrorCode, Grants, HostError, ProcessAccess,
    ProcessHostConfig, ProcessRequest, pid_namespace_support, run_command,
};
use quirl_lua_reference_parent::{Containment, containment_report};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
const PYTHON: &str = "/usr/bin/python3";

/// A fresh directory for one test; removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quirl-containment-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A program, or a printed reason to skip (a failure where the run
/// requires the test programs).
fn program_or_skip(test: &str, path: &str) -> bool {
    let found = Path::new(path).exists()
        || PATH
            .split(':')
            .any(|dir| Path::new(dir).join(path).is_file());
    if !found {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            &format!("`{path}` is not installed here"),
        );
    }
    found
}

fn enabled() -> ProcessAccess {
    ProcessAccess {
        allow_process: true,
        process_enabled: true,
    }
}

fn run(config: &ProcessHostConfig, command: &str) -> Result<CommandOutcomeData, HostError> {
    run_command(
        config,
        &ProcessRequest {
            command: command.to_owned(),
            deadline: Instant::now() + Duration::from_secs(30),
            max_output_bytes: 256 * 1024,
        },
        &Cancel::new(),
    )
}

/// `git` run by the test itself (outside any sandbox), in `dir`.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

// DESIGN §16.8: writes only beneath the working directory and the
// private directory.
// DESIGN §16.6-c
#[test]
fn a_granted_git_cannot_change_the_operators_gitconfig_or_anything_outside_its_repository() {
    let test =
        "a_granted_git_cannot_change_the_operators_gitconfig_or_anything_outside_its_repository";
    if !program_or_skip(test, "git") {
        return;
    }
    let scratch = Scratch::new("git");
    let home = scratch.dir("operator-home");
    let gitconfig = home.join(".gitconfig");
    let original = "[user]\n\tname = operator\n";
    std::fs::write(&gitconfig, original).unwrap();
    let repo = scratch.dir("repo");
    git(&repo, &["init", "-q"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ],
    );
    std::fs::write(repo.join("new-file"), "x\n").unwrap();
    let outside = scratch.dir("outside");
    // The operator's HOME, declared: readable, not writable.
    let declared = ProcessHostConfig::new(
        enabled(),
        Grants::parse(["process.spawn:git"]).unwrap(),
        Environment::empty()
            .with("PATH", PATH)
            .unwrap()
            .with("HOME", home.as_os_str())
            .unwrap(),
        &repo,
    )
    .unwrap();
    // What git is granted for still works.
    let outcome = run(&declared, "git status --porcelain").unwrap();
    assert_eq!(
        (outcome.status, outcome.stdout.as_str()),
        (0, "?? new-file\n"),
        "{outcome:?}"
    );
    let outcome = run(&declared, "git log --oneline").unwrap();
    assert!(outcome.stdout.contains("first"), "{outcome:?}");
    let outcome = run(&declared, "git config --global user.name").unwrap();
    assert_eq!(
        outcome.stdout, "operator\n",
        "reads the operator's config: {outcome:?}"
    );
    // Writing inside the repository works.
    let outcome = run(&declared, "git add new-file").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    let outcome = run(&declared, "git -c user.email=t@t commit -q -m second").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    // The operator's ~/.gitconfig cannot be changed ...
    let outcome = run(&declared, "git config --global core.pager evil").unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    assert_eq!(std::fs::read_to_string(&gitconfig).unwrap(), original);
    // ... nor any file outside the repository.
    let outcome = run(
        &declared,
        &format!("git config --file {}/planted a.b c", outside.display()),
    )
    .unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    let outcome = run(&declared, &format!("git -C {} init -q", outside.display())).unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // Without a declared HOME the command's own is private and empty: a
    // write succeeds there and is gone with the command.
    let private = ProcessHostConfig::new(
        enabled(),
        Grants::parse(["process.spawn:git"]).unwrap(),
        Environment::empty().with("PATH", PATH).unwrap(),
        &repo,
    )
    .unwrap();
    let outcome = run(&private, "git config --global core.pager evil").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    let outcome = run(&private, "git config --global core.pager").unwrap();
    assert_eq!(
        outcome.stdout, "",
        "the private HOME survived its command: {outcome:?}"
    );
    assert_eq!(std::fs::read_to_string(&gitconfig).unwrap(), original);
}

// DESIGN §16.8: a program planted in a directory commands may write is
// never what a bare name resolves to.
#[test]
fn path_lookup_skips_directories_commands_may_write() {
    let scratch = Scratch::new("plant");
    let work = scratch.dir("work");
    let planted = work.join("bin");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("echo"), "#!/bin/cat\nplanted\n").unwrap();
    std::fs::set_permissions(
        planted.join("echo"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = ProcessHostConfig::new(
        enabled(),
        Grants::parse(["process.spawn:echo"]).unwrap(),
        Environment::empty()
            .with("PATH", format!("{}:/usr/bin:/bin", planted.display()))
            .unwrap(),
        &work,
    )
    .unwrap();
    let outcome = run(&config, "echo real").unwrap();
    assert_eq!(outcome.stdout, "real\n", "{outcome:?}");
    // With only the writable directory on PATH, nothing is found, and the
    // error says why.
    let config = ProcessHostConfig::new(
        enabled(),
        Grants::parse(["process.spawn:echo"]).unwrap(),
        Environment::empty()
            .with("PATH", planted.as_os_str())
            .unwrap(),
        &work,
    )
    .unwrap();
    let error = run(&config, "echo real").unwrap_err();
    assert_eq!(error.code(), ErrorCode::ProcessSpawn, "{error:?}");
    assert!(
        error
            .context()
            .iter()
            .any(|line| line.contains("may write beneath it")),
        "{error:?}"
    );
    // A granted absolute path there is refused too.
    let config = ProcessHostConfig::new(
        enabled(),
        Grants::parse([format!("process.spawn:{}/echo", planted.display())]).unwrap(),
        Environment::empty().with("PATH", "/usr/bin").unwrap(),
        &work,
    )
    .unwrap();
    let error = run(&config, &format!("{}/echo x", planted.display())).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Validation, "{error:?}");
}

/// `quirl-lua batch` with `lines` on stdin; its pid is handed to `lines`
/// so they can name it. Returns the output lines and the exit status.
fn batch(args: &[&str], lines: impl FnOnce(u32) -> String) -> (Vec<String>, Option<i32>) {
    let mut child = Command::new(CLI)
        .args(args)
        .arg("batch")
        .env("PATH", PATH)
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = lines(child.id());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (lines, output.status.code())
}

// DESIGN §16.7: a host command cannot signal the parent (Landlock's signal
// scope, and its PID namespace, where it cannot even name it).
// DESIGN §16.7-a
#[test]
fn a_command_cannot_signal_quirl_lua() {
    let test = "a_command_cannot_signal_quirl_lua";
    if !program_or_skip(test, "kill") {
        return;
    }
    let (lines, status) = batch(
        &["--allow-process", "--grant", "process.spawn:kill"],
        |pid| {
            let run = |signal: &str| {
                format!(
                    "{{\"op\":\"eval\",\"source\":\"local r = quirl.process.run('kill -{signal} {pid}') return r.status\"}}\n"
                )
            };
            format!(
                "{}{}{}{{\"op\":\"eval\",\"source\":\"return 42\"}}\n",
                run("STOP"),
                run("KILL"),
                run("TERM")
            )
        },
    );
    assert_eq!(status, Some(0), "{lines:?}");
    assert_eq!(lines.len(), 4, "{lines:?}");
    for line in &lines[..3] {
        assert!(
            line.starts_with("{\"ok\":true,\"result\":") && !line.ends_with("\"result\":0}"),
            "the kill succeeded: {line}"
        );
    }
    assert_eq!(lines[3], "{\"ok\":true,\"result\":42}");
}

/// The escape of one run: move out of every cgroup it can name (denied:
/// the cgroup filesystem is read-only to a command, and it holds no
/// capability), then a chain that forks, lets the parent exit and calls
/// `setsid`, generation after generation, while the command's first
/// process lingers a little and exits. Every process carries `MARKER` in
/// its command line.
const ESCAPE: &str = r#"
import os, sys, time
for procs in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs",
              "/sys/fs/cgroup/pids/cgroup.procs"):
    try:
        with open(procs, "w") as f:
            f.write("0")
    except OSError:
        pass
if os.fork() == 0:
    while True:
        if os.fork() != 0:
            os._exit(0)
        try:
            os.setsid()
        except OSError:
            pass
time.sleep(0.05)
"#;

/// Live processes with `marker` as an argument.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline
            .split(|b| *b == 0)
            .any(|part| part == marker.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

/// 100 runs of `quirl-lua` in `mode`, each running [`ESCAPE`]; after each
/// run exits, no process of it is left.
fn nothing_survives_quirl_lua(mode: &str, test: &str) {
    if !program_or_skip(test, PYTHON) {
        return;
    }
    let scratch = Scratch::new(mode);
    let script = scratch.0.join("escape.py");
    std::fs::write(&script, ESCAPE).unwrap();
    let started = Instant::now();
    for run in 0..100 {
        let marker = format!("quirl-escape-{}-{mode}-{run}", std::process::id());
        let source = format!(
            "local r = quirl.process.run('{PYTHON} {} {marker}') return r.status",
            script.display()
        );
        let output = Command::new(CLI)
            .args([
                "--containment",
                mode,
                "--allow-process",
                "--grant",
                "process.spawn",
                "eval",
                &source,
            ])
            .env("PATH", PATH)
            .env_remove("QUIRL_LUA_WORKER")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "0",
            "run {run}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let left = processes_with(&marker);
        kill_all(&left);
        assert!(left.is_empty(), "run {run} in {mode} mode left {left:?}");
    }
    eprintln!("{mode}: 100 runs in {:?}", started.elapsed());
}

// DESIGN §16.7-a
#[test]
fn in_cgroup_mode_nothing_a_command_starts_survives_quirl_lua() {
    let test = "in_cgroup_mode_nothing_a_command_starts_survives_quirl_lua";
    let report = containment_report(Containment::Cgroup);
    if report.cgroup.is_none() {
        quirl_lua_testkit::environment::skip("cgroup", test, &report.summary());
        return;
    }
    nothing_survives_quirl_lua("cgroup", test);
}

// DESIGN §16.7-a
#[test]
fn in_process_group_mode_nothing_a_command_starts_survives_quirl_lua() {
    nothing_survives_quirl_lua(
        "process-group",
        "in_process_group_mode_nothing_a_command_starts_survives_quirl_lua",
    );
}

/// Forks `sys.argv[1]` sleeping children, counting the forks that fail.
const FORKS: &str = r#"
import os, sys, time
made = failed = 0
for _ in range(int(sys.argv[1])):
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        made += 1
    except OSError:
        failed += 1
print(made, failed)
"#;

// DESIGN §16.7: the process limit is enforced (or the command refused),
// never ignored, in both modes.
// DESIGN §16.7-b
#[test]
fn the_command_process_limit_is_enforced_or_the_command_refused() {
    let test = "the_command_process_limit_is_enforced_or_the_command_refused";
    if !program_or_skip(test, PYTHON) {
        return;
    }
    let scratch = Scratch::new("pids");
    let script = scratch.0.join("forks.py");
    std::fs::write(&script, FORKS).unwrap();
    for mode in [Containment::Cgroup, Containment::ProcessGroup] {
        if mode == Containment::Cgroup && containment_report(Containment::Cgroup).cgroup.is_none() {
            continue;
        }
        let config = ProcessHostConfig::new(
            enabled(),
            Grants::parse(["process.spawn"]).unwrap(),
            Environment::empty().with("PATH", PATH).unwrap(),
            scratch.dir("work"),
        )
        .unwrap()
        .with_containment(mode)
        .with_command_pids_max(Some(16));
        let summary = containment_report(mode).command_pids_limit;
        match run(&config, &format!("{PYTHON} {} 60", script.display())) {
            Ok(outcome) => {
                let counts: Vec<u32> = outcome
                    .stdout
                    .split_whitespace()
                    .map(|count| count.parse().unwrap())
                    .collect();
                // The first process, its init where there is one, and at
                // most the rest of 16.
                assert!(counts[0] <= 15, "{mode}: {outcome:?} ({summary})");
                assert!(counts[1] >= 45, "{mode}: {outcome:?} ({summary})");
                assert!(!summary.starts_with("unavailable"), "{summary}");
            }
            Err(error) => {
                // Refused, saying why: only where no pids controller exists.
                assert!(summary.starts_with("unavailable"), "{mode}: {error:?}");
                assert_eq!(error.code(), ErrorCode::ProcessSpawn, "{error:?}");
                assert!(
                    error
                        .context()
                        .iter()
                        .any(|line| line.starts_with("command pids limit: unavailable")),
                    "{error:?}"
                );
            }
        }
        // Without a limit the same command forks all 60.
        let unlimited = config.clone().with_command_pids_max(None);
        let outcome = run(&unlimited, &format!("{PYTHON} {} 60", script.display())).unwrap();
        assert_eq!(outcome.stdout.trim(), "60 0", "{mode}: {outcome:?}");
    }
    // `--version --verbose` says how the limit is enforced here.
    let output = Command::new(CLI)
        .args(["--version", "--verbose"])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("\ncommand pids limit: "), "{text}");
    assert!(text.contains("\npid namespace: "), "{text}");
    if pid_namespace_support().is_ok() {
        assert!(text.contains("PID namespace of its own"), "{text}");
    }
}

/// DESIGN §16.7 for an unprivileged parent: where the kernel allows
/// unprivileged user namespaces, `quirl-lua` run as `nobody` still puts
/// each host command in a PID namespace of its own (inside a user
/// namespace that maps only `nobody`), and a process limit it cannot set
/// in a cgroup is `RLIMIT_NPROC` there. Needs root (to become `nobody`
/// with `setpriv`); elsewhere it prints why and returns.
#[test]
fn an_unprivileged_quirl_lua_still_contains_its_commands() {
    let test = "an_unprivileged_quirl_lua_still_contains_its_commands";
    if !program_or_skip(test, PYTHON) {
        return;
    }
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|line| line.starts_with("Uid:\t0\t"));
    if !root || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIPPED {test}: needs root and setpriv to run quirl-lua as nobody");
        return;
    }
    let scratch = Scratch::new("nobody");
    let script = scratch.0.join("forks.py");
    std::fs::write(&script, FORKS).unwrap();
    let as_nobody = |args: &[&str]| {
        let output = Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", CLI])
            .args(args)
            .current_dir(&scratch.0)
            .env("PATH", "/usr/bin:/bin")
            .env_remove("QUIRL_LUA_WORKER")
            .env_remove("TMPDIR")
            .output()
            .unwrap();
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (verbose, _) = as_nobody(&["--version", "--verbose"]);
    if verbose.contains("\npid namespace: unavailable") {
        eprintln!("SKIPPED {test}: no unprivileged user namespaces here:\n{verbose}");
        return;
    }
    assert!(verbose.contains("inside a user namespace"), "{verbose}");
    let forks = |limit: &str| {
        as_nobody(&[
            "--allow-process",
            "--grant",
            "process.spawn",
            "--command-pids-max",
            limit,
            "eval",
            &format!(
                "return quirl.process.run('{PYTHON} {} 60').value",
                script.display()
            ),
        ])
    };
    let (limited, stderr) = forks("16");
    if verbose.contains("command pids limit: unavailable") {
        assert!(
            stderr.contains("could not apply the command's process limit"),
            "{stderr}"
        );
    } else {
        let counts: Vec<u32> = limited
            .trim()
            .trim_matches('"')
            .trim_end_matches("\\n")
            .split_whitespace()
            .map(|count| count.parse().unwrap())
            .collect();
        assert!(counts[0] <= 15 && counts[1] >= 45, "{limited} {stderr}");
    }
    let (unlimited, stderr) = forks("max");
    assert_eq!(unlimited.trim(), "\"60 0\\n\"", "{stderr}");
    // The command holds no capability in its user namespace either, and
    // lives two PID namespaces deep.
    let (status, stderr) = as_nobody(&[
        "--allow-process",
        "--grant",
        "process.spawn:cat",
        "eval",
        "return quirl.process.run('cat /proc/self/status').value",
    ]);
    for name in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert!(
            status.contains(&format!("{name}:\\t0000000000000000")),
            "{name}: {status} {stderr}"
        );
    }
    let levels = status
        .split("\\n")
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map(|pids| pids.split("\\t").filter(|pid| !pid.is_empty()).count());
    assert_eq!(levels, Some(2), "{status}");
}
