//! The containment of host commands granted by name (DESIGN §16.2, §16.6):
//! the exec guard lets a granted program start no other program (`EPERM`),
//! and behind it the Landlock execute ruleset allows only the program's own
//! file and its interpreter (`EACCES`), so each escape through an option
//! that runs another program fails and leaves nothing behind, while the
//! granted program itself works.
//!
//! Every escape is also run under the unscoped grant `process.spawn`, which
//! applies neither: there it succeeds, so each test shows that the escape
//! is real on this machine and that the containment is what stops it.
//! Tests skip with a printed reason where Landlock or a program is absent.
//! (`exec_guard.rs` has the routes through the dynamic loader and `memfd`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    CommandOutcomeData, Environment, ErrorCode, GrantRule, Grants, HostError, ProcessAccess,
    ProcessHostConfig, ProcessRequest, exec_guard_support, landlock_support, run_command,
};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A fresh directory for one test; removed by [`Scratch::drop`].
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quirl-landlock-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// An executable script that creates `ran` in this directory: the
    /// ungranted program each escape tries to start.
    fn marker_script(&self) -> PathBuf {
        let script = self.path("mark.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\n: > '{}'\ncat\n", self.path("ran").display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        script
    }

    fn ran(&self) -> bool {
        self.path("ran").exists()
    }

    fn reset(&self) {
        let _ = std::fs::remove_file(self.path("ran"));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Landlock in force, or a printed reason to skip.
fn landlock_or_skip(test: &str) -> bool {
    let support = landlock_support();
    if !support.available() {
        quirl_lua_testkit::environment::skip("landlock", test, &support.summary());
    }
    support.available()
}

/// A program on the granted `PATH`, or a printed reason to skip.
fn program_or_skip(test: &str, name: &str) -> bool {
    let found = PATH
        .split(':')
        .any(|dir| Path::new(dir).join(name).is_file());
    if !found {
        eprintln!("SKIPPED {test}: `{name}` is not installed here");
    }
    found
}

fn config_in(grants: &[&str], cwd: &Path) -> ProcessHostConfig {
    ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(grants).unwrap(),
        Environment::empty()
            .with("PATH", PATH)
            .unwrap()
            .with("HOME", cwd.as_os_str())
            .unwrap(),
        cwd,
    )
    .unwrap()
}

fn run(config: &ProcessHostConfig, command: &str) -> Result<CommandOutcomeData, HostError> {
    run_command(
        config,
        &ProcessRequest {
            command: command.to_owned(),
            deadline: Instant::now() + Duration::from_secs(20),
            max_output_bytes: 256 * 1024,
        },
        &Cancel::new(),
    )
}

/// Live processes whose command line mentions `needle` (the scratch path
/// of one test), other than this test process.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// The escape `command` (granted by `grant` alone) starts the marker
/// script only without the ruleset: under `process.spawn:GRANT` the marker
/// is never created and no process of the command is left.
fn escape_is_refused(scratch: &Scratch, grant: &str, command: &str) -> CommandOutcomeData {
    // Control: the unscoped grant applies no ruleset, and the escape works.
    let open = config_in(&["process.spawn"], &scratch.0);
    let outcome = run(&open, command).unwrap();
    assert!(
        scratch.ran(),
        "without the ruleset `{command}` should have run the marker: {outcome:?}"
    );
    scratch.reset();
    let granted = config_in(&[&format!("process.spawn:{grant}")], &scratch.0);
    let outcome = run(&granted, command).unwrap();
    assert!(!scratch.ran(), "`{command}` escaped its grant: {outcome:?}");
    assert!(
        processes_mentioning(&scratch.0.display().to_string()).is_empty(),
        "`{command}` left processes behind"
    );
    outcome
}

/// Each refusal is the exec guard's `EPERM`, or where the guard is not in
/// force Landlock's `EACCES`.
fn refused_exec(stderr: &str) -> bool {
    stderr.contains("Operation not permitted") || stderr.contains("Permission denied")
}

// DESIGN §16.6: setarch under its other names runs its arguments; under
// every name it is refused (DESIGN §16.2 "Identity").
#[test]
fn setarch_under_every_name_is_refused() {
    // DESIGN §16.6-a: a program granted by name cannot start another.
    let test = "setarch_under_every_name_is_refused";
    for alias in ["x86_64", "i386", "linux32", "linux64", "setarch"] {
        if !program_or_skip(test, alias) {
            continue;
        }
        let scratch = Scratch::new(alias);
        let grant = format!("process.spawn:{alias}");
        let error = match Grants::parse([&grant]) {
            Err(error) => error,
            Ok(grants) => ProcessHostConfig::new(
                ProcessAccess {
                    allow_process: true,
                    process_enabled: true,
                },
                grants,
                Environment::empty().with("PATH", PATH).unwrap(),
                &scratch.0,
            )
            .unwrap_err(),
        };
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error:?}");
    }
}

#[test]
fn sort_cannot_start_its_compress_program() {
    // DESIGN §16.6-a: a program granted by name cannot start another.
    let test = "sort_cannot_start_its_compress_program";
    if !landlock_or_skip(test) {
        return;
    }
    // coreutils' `sort` is on every machine these tests run on (CI's
    // included): its absence is a broken machine, not a reason to skip.
    assert!(
        PATH.split(':')
            .any(|dir| Path::new(dir).join("sort").is_file()),
        "`sort` (coreutils) is needed on {PATH}"
    );
    let scratch = Scratch::new("sort");
    let marker = scratch.marker_script();
    write_lines(&scratch.path("input"), 20_000);
    std::fs::create_dir_all(scratch.path("tmp")).unwrap();
    let outcome = escape_is_refused(
        &scratch,
        "sort",
        &format!(
            "sort -S 64k -T {} --compress-program={} {}",
            scratch.path("tmp").display(),
            marker.display(),
            scratch.path("input").display()
        ),
    );
    assert_ne!(outcome.status, 0, "{outcome:?}");
}

#[test]
fn gcc_cannot_start_its_wrapper() {
    let test = "gcc_cannot_start_its_wrapper";
    if !landlock_or_skip(test) || !program_or_skip(test, "gcc") {
        return;
    }
    let scratch = Scratch::new("gcc");
    let marker = scratch.marker_script();
    std::fs::write(scratch.path("a.c"), "int main(void) { return 0; }\n").unwrap();
    let outcome = escape_is_refused(
        &scratch,
        "gcc",
        &format!(
            "gcc -wrapper {} -c {} -o {}",
            marker.display(),
            scratch.path("a.c").display(),
            scratch.path("a.o").display()
        ),
    );
    assert_ne!(outcome.status, 0, "{outcome:?}");
}

#[test]
fn sqlite3_cannot_run_a_shell_command() {
    let test = "sqlite3_cannot_run_a_shell_command";
    if !landlock_or_skip(test) || !program_or_skip(test, "sqlite3") {
        return;
    }
    let scratch = Scratch::new("sqlite3");
    let marker = scratch.marker_script();
    for dot in [".shell", ".system"] {
        let outcome = escape_is_refused(
            &scratch,
            "sqlite3",
            &format!("sqlite3 :memory: '{dot} {}'", marker.display()),
        );
        assert!(!scratch.ran(), "{outcome:?}");
    }
}

#[test]
fn find_exec_and_tar_to_command_are_refused_by_the_kernel() {
    let test = "find_exec_and_tar_to_command_are_refused_by_the_kernel";
    if !landlock_or_skip(test) || !program_or_skip(test, "find") || !program_or_skip(test, "tar") {
        return;
    }
    let scratch = Scratch::new("find-tar");
    let marker = scratch.marker_script();
    let outcome = escape_is_refused(
        &scratch,
        "find",
        &format!(
            "find {} -name mark.sh -exec {} ';'",
            scratch.0.display(),
            marker.display()
        ),
    );
    assert!(refused_exec(&outcome.stderr), "{outcome:?}");
    std::fs::write(scratch.path("member"), "data\n").unwrap();
    let archive = scratch.path("a.tar");
    let made = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&scratch.0)
        .arg("member")
        .status()
        .unwrap();
    assert!(made.success());
    let outcome = escape_is_refused(
        &scratch,
        "tar",
        &format!(
            "tar -xf {} --to-command={}",
            archive.display(),
            marker.display()
        ),
    );
    assert_ne!(outcome.status, 0, "{outcome:?}");
}

#[test]
fn git_cannot_start_a_pager_or_an_alias() {
    let test = "git_cannot_start_a_pager_or_an_alias";
    if !landlock_or_skip(test) || !program_or_skip(test, "git") {
        return;
    }
    let scratch = Scratch::new("git-escape");
    let marker = scratch.marker_script();
    init_repo(&scratch.0);
    // `git -c alias.x=!CMD x` runs CMD through the shell.
    escape_is_refused(
        &scratch,
        "git",
        &format!("git -c alias.x=!{} x", marker.display()),
    );
}

/// What the grant allows: the program itself, with any arguments (SPEC
/// §16.2).
#[test]
fn granted_git_sed_find_tar_and_sort_work_normally() {
    let test = "granted_git_sed_find_tar_and_sort_work_normally";
    if !landlock_or_skip(test) {
        return;
    }
    let scratch = Scratch::new("works");
    if program_or_skip(test, "git") {
        let repo = scratch.path("repo");
        std::fs::create_dir_all(&repo).unwrap();
        init_repo(&repo);
        std::fs::write(repo.join("new-file"), "x\n").unwrap();
        let config = config_in(&["process.spawn:git"], &repo);
        let outcome = run(&config, "git status --porcelain").unwrap();
        assert_eq!(outcome.status, 0, "{outcome:?}");
        assert_eq!(outcome.stdout, "?? new-file\n", "{outcome:?}");
        let outcome = run(&config, "git log --oneline").unwrap();
        assert_eq!(outcome.status, 0, "{outcome:?}");
        assert!(outcome.stdout.contains("first"), "{outcome:?}");
    }
    std::fs::write(scratch.path("lines"), "one\ntwo\nthree\n").unwrap();
    let config = config_in(
        &[
            "process.spawn:sed",
            "process.spawn:find",
            "process.spawn:tar",
            "process.spawn:sort",
        ],
        &scratch.0,
    );
    let outcome = run(&config, "sed -n 's/t/T/p' lines").unwrap();
    assert_eq!(
        (outcome.status, outcome.stdout.as_str()),
        (0, "Two\nThree\n")
    );
    let outcome = run(
        &config,
        &format!("find {} -name lines", scratch.0.display()),
    )
    .unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    assert_eq!(
        outcome.stdout.trim(),
        scratch.path("lines").display().to_string()
    );
    let outcome = run(&config, "tar -cf out.tar lines").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    let outcome = run(&config, "tar -tf out.tar").unwrap();
    assert_eq!(outcome.stdout, "lines\n", "{outcome:?}");
    // A sort that spills to temporary files (64 KiB buffer, 20,000 lines).
    write_lines(&scratch.path("input"), 20_000);
    std::fs::create_dir_all(scratch.path("tmp")).unwrap();
    let outcome = run(&config, "sort -n -S 64k -T tmp input").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    let sorted: Vec<u64> = outcome.stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(sorted.len(), 20_000);
    assert!(sorted.windows(2).all(|pair| pair[0] <= pair[1]));
}

/// DESIGN §16.2: with the exec guard the list refuses only programming
/// environments; without it, the whole list.
#[test]
fn the_grant_rule_follows_the_exec_guard() {
    for name in ["git", "sed", "find", "tar"] {
        let grant = format!("process.spawn:{name}");
        assert!(Grants::parse_under(GrantRule::ExecGuard, [&grant]).is_ok());
        let error = Grants::parse_under(GrantRule::ProgramList, [&grant]).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert!(
            error
                .context()
                .iter()
                .any(|line| line.starts_with("exec guard: ")),
            "{error:?}"
        );
    }
    for name in ["sh", "env", "python3", "busybox", "vim.basic", "perl5.36.0"] {
        let grant = format!("process.spawn:{name}");
        assert!(Grants::parse_under(GrantRule::ExecGuard, [&grant]).is_err());
    }
    let expected = if exec_guard_support().is_ok() {
        GrantRule::ExecGuard
    } else {
        GrantRule::ProgramList
    };
    assert_eq!(Grants::none().rule(), expected);
}

/// DESIGN §16.6: a grant accepted under the Landlock rule is never run
/// without the ruleset; `require_landlock` passes where Landlock is in
/// force (and fails closed elsewhere).
#[test]
fn require_landlock_runs_only_under_the_ruleset() {
    let scratch = Scratch::new("require");
    let config = config_in(&["process.spawn:cat"], &scratch.0).with_require_landlock(true);
    let result = run(&config, "cat /proc/self/status");
    if landlock_support().available() {
        let outcome = result.unwrap();
        assert_eq!(outcome.status, 0);
    } else {
        let error = result.unwrap_err();
        assert_eq!(error.code(), ErrorCode::ProcessSpawn);
        assert!(
            error.message().contains("Landlock is required"),
            "{error:?}"
        );
    }
}

fn init_repo(dir: &Path) {
    for args in [
        &["init", "-q"][..],
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
        ][..],
    ] {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("HOME", dir)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }
}

fn write_lines(path: &Path, count: u64) {
    let text: String = (0..count).rev().map(|n| format!("{n}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// DESIGN §16.6: `--version --verbose` and `stats` say whether host commands
/// run under the ruleset; `--require-landlock` is accepted where they do.
#[test]
fn the_cli_reports_landlock_in_version_and_stats() {
    const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
    let support = landlock_support();
    let output = std::process::Command::new(CLI)
        .args(["--version", "--verbose"])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains(&format!("landlock: {}\n", support.summary())),
        "{text}"
    );
    let mut child = std::process::Command::new(CLI)
        .args(["--require-landlock", "stats", "--json"])
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"op\":\"eval\",\"source\":\"return 1\"}\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    if support.available() {
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let stats: serde_json::Value =
            serde_json::from_slice(output.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(
            stats["containment"]["landlock"]["abi"],
            serde_json::json!(support.abi),
            "{stats}"
        );
        assert!(
            stats["containment"]["landlock"]["unavailable"].is_null(),
            "{stats}"
        );
        // DESIGN §18.3: the worker's own domain, next to its seccomp mode.
        assert_eq!(
            stats["containment"]["worker_lockdown"],
            quirl_lua_reference_worker::lockdown::summary(),
            "{stats}"
        );
    } else {
        // Fails closed before anything starts.
        assert_eq!(output.status.code(), Some(2), "{output:?}");
    }
}
