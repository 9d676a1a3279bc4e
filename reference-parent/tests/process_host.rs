//! The proxied process host end to end: real programs, real process trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    CommandOutcomeData, Environment, ErrorCode, Grants, HostError, ProcessAccess,
    ProcessHostConfig, ProcessRequest, run_command,
};

const PATH: &str = "/usr/bin:/bin";
/// Generous bound for "promptly": kill, sweep and reap on a loaded 2-core box.
const PROMPTLY: Duration = Duration::from_secs(2);

fn config(grants: &[&str]) -> ProcessHostConfig {
    ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(grants).unwrap(),
        Environment::empty().with("PATH", PATH).unwrap(),
        "/",
    )
    .unwrap()
}

fn request(command: &str, deadline: Duration) -> ProcessRequest {
    ProcessRequest {
        command: command.to_owned(),
        deadline: Instant::now() + deadline,
        max_output_bytes: 64 * 1024,
    }
}

fn run(config: &ProcessHostConfig, command: &str) -> Result<CommandOutcomeData, HostError> {
    run_command(
        config,
        &request(command, Duration::from_secs(10)),
        &Cancel::new(),
    )
}

/// A token unique to this test process and call, used to find processes.
fn marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "1000.{}{:04}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live processes that have `arg` as one of their arguments.
fn processes_with_arg(arg: &str) -> Vec<u32> {
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
            .any(|part| part == arg.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

/// Wait (bounded) until no live process carries `arg`; return what is left.
fn leftovers(arg: &str) -> Vec<u32> {
    let until = Instant::now() + PROMPTLY;
    loop {
        let found = processes_with_arg(arg);
        if found.is_empty() || Instant::now() > until {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists in any form (running, or a zombie
/// nobody reaped).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A directory of its own for one test's files, which commands of
/// [`writable_config`] may write (DESIGN §16.8: by default a command
/// writes only beneath its working directory and its private directory).
fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("quirl-process-host-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// [`config`] whose commands may also write beneath `dir`.
fn writable_config(grants: &[&str], dir: &std::path::Path) -> ProcessHostConfig {
    config(grants).allow_writes_beneath(dir).unwrap()
}

/// A shell fragment that writes the shell's pid as the parent sees it (the
/// first field of `/proc/self/stat`, which the host's `/proc` reports in
/// its own PID namespace) to `file`.
fn record_pid(file: &std::path::Path) -> String {
    format!(
        "read p rest < /proc/self/stat; echo $p > {}",
        file.display()
    )
}

#[test]
fn echo_hi_returns_status_zero_and_its_output() {
    let outcome = run(&config(&["process.spawn:echo"]), "echo hi").unwrap();
    assert_eq!(outcome.status, 0);
    assert_eq!(outcome.stdout, "hi\n");
    assert_eq!(outcome.stderr, "");
    assert_eq!(outcome.signal, None);
}

#[test]
fn quoted_arguments_reach_the_program_unchanged() {
    let outcome = run(
        &config(&["process.spawn:printf"]),
        r#"printf '[%s]' 'a b' "c\"d" e\ f '' '&;|' "\$HOME""#,
    )
    .unwrap();
    assert_eq!(outcome.stdout, r#"[a b][c"d][e f][][&;|][$HOME]"#);
}

// SPEC §16.1-e
#[test]
fn stdin_is_empty_so_cat_sees_eof_at_once() {
    let started = Instant::now();
    let outcome = run(&config(&["process.spawn:cat"]), "cat").unwrap();
    assert_eq!(outcome.status, 0);
    assert_eq!(outcome.stdout, "");
    assert!(started.elapsed() < PROMPTLY);
}

// SPEC §16.1-h: own session and process group, no controlling terminal.
#[test]
fn the_child_has_no_terminal() {
    let outcome = run(&config(&["process.spawn:tty"]), "tty").unwrap();
    assert_ne!(outcome.status, 0);
    assert_eq!(outcome.stdout, "not a tty\n");
    // No controlling terminal either: the child leads its own session.
    let outcome = run(&config(&["process.spawn:cat"]), "cat /proc/self/stat").unwrap();
    let rest = &outcome.stdout[outcome.stdout.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let pid: &str = outcome.stdout.split_whitespace().next().unwrap();
    assert_eq!(fields[2], pid, "process group");
    assert_eq!(fields[3], pid, "session");
    assert_eq!(fields[4], "0", "controlling terminal");
}

#[test]
fn the_child_runs_with_no_new_privs() {
    let outcome = run(&config(&["process.spawn:cat"]), "cat /proc/self/status").unwrap();
    assert!(outcome.stdout.lines().any(|line| line == "NoNewPrivs:\t1"));
}

// SPEC §16.1-f
#[test]
fn stdout_and_stderr_are_captured_separately() {
    let outcome = run(
        &config(&["process.spawn"]),
        "sh -c 'echo out; echo err >&2; exit 3'",
    )
    .unwrap();
    assert_eq!(outcome.status, 3);
    assert_eq!(outcome.stdout, "out\n");
    assert_eq!(outcome.stderr, "err\n");
}

#[test]
fn a_signal_is_reported_as_128_plus_its_number() {
    let outcome = run(&config(&["process.spawn"]), "sh -c 'kill -TERM $$'").unwrap();
    assert_eq!(outcome.status, 128 + 15);
    assert_eq!(outcome.signal, Some(15));
    assert_eq!(outcome.signal_name(), Some("SIGTERM"));
}

#[test]
fn invalid_utf8_is_replaced_and_flagged() {
    let outcome = run(&config(&["process.spawn:printf"]), r"printf 'a\377b'").unwrap();
    assert_eq!(outcome.stdout, "a\u{fffd}b");
    assert!(outcome.stdout_lossy);
    assert!(!outcome.stderr_lossy);
}

// SPEC §16.1-f, §16.1-g
#[test]
fn output_up_to_the_cap_is_kept_and_one_byte_more_is_a_resource_limit() {
    let config = config(&["process.spawn:head"]);
    let mut at_cap = request("head -c 1000 /dev/zero", Duration::from_secs(10));
    at_cap.max_output_bytes = 1000;
    assert_eq!(
        run_command(&config, &at_cap, &Cancel::new())
            .unwrap()
            .stdout
            .len(),
        1000
    );
    at_cap.max_output_bytes = 999;
    let error = run_command(&config, &at_cap, &Cancel::new()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(
        error.context()[0].contains("stdout retained 999 and discarded 1 bytes"),
        "{error:?}"
    );
    assert_eq!(error.exit_status(), Some(0));
}

// SPEC §16.1-g: the excess is read and discarded, the child ends and is reaped, the call fails with
// resource_limit.
#[test]
fn output_over_the_cap_is_drained_and_the_child_reaped() {
    let dir = temp_dir("over-cap");
    let pid_file = dir.join("pid");
    let command = format!(
        "sh -c '{}; head -c 3000000 /dev/zero; echo done >&2'",
        record_pid(&pid_file)
    );
    let config = writable_config(&["process.spawn"], &dir);
    let error = run_command(
        &config,
        &request(&command, Duration::from_secs(20)),
        &Cancel::new(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    // The child was not blocked by the full pipe: it ran to its end.
    assert_eq!(error.exit_status(), Some(0));
    assert!(
        error.context()[0].contains("discarded 2934464 bytes"),
        "{error:?}"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!exists(pid), "the command's process {pid} is left");
}

#[test]
fn the_host_maximum_caps_max_output_bytes() {
    let config = config(&["process.spawn:head"]);
    let mut large = request("head -c 1048577 /dev/zero", Duration::from_secs(20));
    large.max_output_bytes = usize::MAX;
    let error = run_command(&config, &large, &Cancel::new()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(
        error.context()[0].contains("limit 1048576 bytes"),
        "{error:?}"
    );
}

// SPEC §16.1-j
#[test]
fn sleep_is_killed_at_the_deadline_and_nothing_remains() {
    let dir = temp_dir("sleep");
    let pid_file = dir.join("pid");
    let mark = marker();
    let command = format!("sh -c '{}; exec sleep {mark}'", record_pid(&pid_file));
    let started = Instant::now();
    let error = run_command(
        &writable_config(&["process.spawn"], &dir),
        &request(&command, Duration::from_millis(300)),
        &Cancel::new(),
    )
    .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(error.message().contains("deadline"));
    assert!(elapsed >= Duration::from_millis(300));
    assert!(
        elapsed < Duration::from_millis(300) + PROMPTLY,
        "{elapsed:?}"
    );
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!exists(pid), "the command's process {pid} is left");
}

#[test]
fn plain_sleep_is_killed_at_the_deadline() {
    let mark = marker();
    let started = Instant::now();
    let error = run_command(
        &config(&["process.spawn:sleep"]),
        &request(&format!("sleep {mark}"), Duration::from_millis(200)),
        &Cancel::new(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(started.elapsed() < Duration::from_millis(200) + PROMPTLY);
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
}

// SPEC §16.1-j
#[test]
fn a_background_grandchild_is_killed_at_the_deadline() {
    let (first, second) = (marker(), marker());
    let command = format!("sh -c \"sleep {first} & sleep {second}\"");
    let error = run_command(
        &config(&["process.spawn"]),
        &request(&command, Duration::from_millis(300)),
        &Cancel::new(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert_eq!(leftovers(&first), Vec::<u32>::new());
    assert_eq!(leftovers(&second), Vec::<u32>::new());
}

#[test]
fn background_work_left_by_a_finished_command_is_killed() {
    let mark = marker();
    let started = Instant::now();
    // The background sleep keeps stdout open; the call must not wait for it.
    let outcome = run_command(
        &config(&["process.spawn"]),
        &request(
            &format!("sh -c 'sleep {mark} & echo started'"),
            Duration::from_secs(30),
        ),
        &Cancel::new(),
    )
    .unwrap();
    assert_eq!(outcome.status, 0);
    assert_eq!(outcome.stdout, "started\n");
    assert!(started.elapsed() < PROMPTLY);
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
}

#[test]
fn descendants_that_leave_the_group_or_session_are_killed() {
    let (group, session) = (marker(), marker());
    // perl's setpgrp moves a background child into its own process group
    // (same session); setsid(1) moves one into its own session.
    let command = format!(
        "sh -c 'perl -e \"setpgrp(0, 0); exec q(sleep), shift\" {group} & \
         setsid sleep {session} & exec sleep 1000'"
    );
    let error = run_command(
        &config(&["process.spawn"]),
        &request(&command, Duration::from_millis(500)),
        &Cancel::new(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert_eq!(leftovers(&group), Vec::<u32>::new());
    assert_eq!(leftovers(&session), Vec::<u32>::new());
}

// SPEC §16.1-j
#[test]
fn cancellation_ends_a_running_command_promptly() {
    let mark = marker();
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let error = run_command(
        &config(&["process.spawn:sleep"]),
        &request(&format!("sleep {mark}"), Duration::from_secs(60)),
        &cancel,
    )
    .unwrap_err();
    canceller.join().unwrap();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(error.message().contains("cancelled"));
    assert!(started.elapsed() < Duration::from_millis(200) + PROMPTLY);
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
}

#[test]
fn a_cancelled_token_or_past_deadline_starts_nothing() {
    let config = config(&["process.spawn:sleep"]);
    let mark = marker();
    let cancel = Cancel::new();
    cancel.cancel();
    let error = run_command(
        &config,
        &request(&format!("sleep {mark}"), Duration::from_secs(10)),
        &cancel,
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    let past = ProcessRequest {
        command: format!("sleep {mark}"),
        deadline: Instant::now(),
        max_output_bytes: 10,
    };
    let error = run_command(&config, &past, &Cancel::new()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(error.message().contains("deadline"));
    assert!(processes_with_arg(&mark).is_empty());
}

// SPEC §16.1-d
#[test]
fn every_rejected_form_is_an_invalid_argument() {
    let config = config(&["process.spawn"]);
    for command in [
        "sleep 1 &",
        "echo a & echo b",
        "fg",
        "bg",
        "jobs",
        "disown",
        "wait",
        "suspend",
        "kill %1",
        "echo a; echo b",
        "echo a | cat",
        "true && echo a",
        "false || echo a",
        "echo a\necho b",
        "cat < /etc/passwd",
        "echo a > /tmp/x",
        "echo a >> /tmp/x",
        "echo a 2> /tmp/x",
        "echo a 2>&1",
        "echo a &> /tmp/x",
        "cat << EOF",
        "cat <> /tmp/x",
        "echo 'unterminated",
        "echo \"unterminated",
        "",
        "   ",
        "echo a\0b",
        "echo $HOME",
        "echo $(id)",
        "echo `id`",
        "ls *",
        "FOO=1 env",
        "cd /",
    ] {
        let error = run(&config, command).unwrap_err();
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{command:?}: {error:?}"
        );
    }
    let oversized = format!("echo {}", "x".repeat(1024 * 1024));
    assert_eq!(
        run(&config, &oversized).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
}

// SPEC §16.1-c: no shell reads the command: quoted operators reach the program as words.
#[test]
fn quoted_operators_are_arguments() {
    let outcome = run(
        &config(&["process.spawn:echo"]),
        "echo '&' \"|\" \\; '2>&1'",
    )
    .unwrap();
    assert_eq!(outcome.stdout, "& | ; 2>&1\n");
}

// SPEC §16.1-a, §16.1-b: the host decides with its own grants and answers a denial with an error.
#[test]
fn an_ungranted_program_is_denied() {
    let config = config(&["process.spawn:echo"]);
    for command in ["cat /etc/passwd", "/bin/echo hi", "./echo"] {
        let error = run(&config, command).unwrap_err();
        assert_eq!(error.code(), ErrorCode::Validation, "{command}");
        assert!(
            error
                .message()
                .starts_with("capability denied: process.spawn:")
        );
    }
    let absolute = run(&config_with_absolute(), "/usr/bin/echo hi").unwrap();
    assert_eq!(absolute.stdout, "hi\n");
    assert_eq!(
        run(&config_with_absolute(), "echo hi").unwrap_err().code(),
        ErrorCode::Validation
    );
}

fn config_with_absolute() -> ProcessHostConfig {
    config(&["process.spawn:/usr/bin/echo"])
}

#[test]
fn process_access_must_be_enabled_at_both_ends() {
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: false,
        },
        Grants::parse(["process.spawn:echo"]).unwrap(),
        Environment::empty().with("PATH", PATH).unwrap(),
        "/",
    )
    .unwrap();
    let error = run(&config, "echo hi").unwrap_err();
    assert_eq!(error.code(), ErrorCode::Validation);
    assert_eq!(
        run(&ProcessHostConfig::disabled(), "echo hi")
            .unwrap_err()
            .code(),
        ErrorCode::Validation
    );
}

// SPEC §16.1-h
#[test]
fn the_environment_is_exactly_the_granted_one() {
    let environment = Environment::empty()
        .with("PATH", PATH)
        .unwrap()
        .with("HOME", "/nonexistent-home")
        .unwrap()
        .with("QUIRL_DECLARED", "value with spaces")
        .unwrap();
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn"]).unwrap(),
        environment,
        "/",
    )
    .unwrap();
    let outcome = run(&config, "env").unwrap();
    let mut lines: Vec<&str> = outcome.stdout.lines().collect();
    lines.sort_unstable();
    // A declared HOME stays; TMPDIR is the command's private one (DESIGN
    // §16.5): emptied after the call, and gone with the configuration.
    let tmpdir = lines.pop().unwrap();
    let private = tmpdir.strip_prefix("TMPDIR=").unwrap().to_owned();
    assert!(private.ends_with("/tmp"), "{tmpdir}");
    assert!(private.contains("quirl-lua-command-"), "{tmpdir}");
    let outcome = run(
        &config,
        "sh -c 'echo x > \"$TMPDIR/left\"; echo \"$TMPDIR\"'",
    )
    .unwrap();
    assert_eq!(
        outcome.stdout.trim(),
        private,
        "the configuration reuses its emptied directory"
    );
    assert_eq!(
        std::fs::read_dir(&private).unwrap().count(),
        0,
        "{private} was left with what the command wrote"
    );
    assert_eq!(
        lines,
        [
            "HOME=/nonexistent-home",
            "PATH=/usr/bin:/bin",
            "QUIRL_DECLARED=value with spaces",
        ]
    );
    drop(config);
    assert!(
        !std::path::Path::new(&private).exists(),
        "{private} outlived its configuration"
    );
    // Without a declared HOME the command's is private and empty.
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn"]).unwrap(),
        Environment::empty().with("PATH", PATH).unwrap(),
        "/",
    )
    .unwrap();
    let outcome = run(&config, "sh -c 'ls -A \"$HOME\"; echo \"$HOME\"'").unwrap();
    let home = outcome.stdout.trim();
    assert!(
        home.ends_with("/home") && home.contains("quirl-lua-command-"),
        "{outcome:?}"
    );
    assert_ne!(Some(home), std::env::var("HOME").ok().as_deref());
}

// SPEC §16.1-h
#[test]
fn the_working_directory_comes_from_the_grants() {
    let dir = temp_dir("cwd");
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn:pwd"]).unwrap(),
        Environment::empty().with("PATH", PATH).unwrap(),
        &dir,
    )
    .unwrap();
    assert_eq!(
        run(&config, "pwd").unwrap().stdout,
        format!("{}\n", dir.display())
    );
    // DESIGN §16.8: bare names are not looked up beneath a directory the
    // command may write (here the working directory itself).
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse(["process.spawn:pwd"]).unwrap(),
        Environment::empty().with("PATH", "/usr").unwrap(),
        "/usr",
    )
    .unwrap();
    assert_eq!(config.writable_roots(), [std::path::Path::new("/usr")]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let config = config(&["process.spawn"]);
    let error = run(&config, "quirl-no-such-program-3f8a").unwrap_err();
    assert_eq!(error.code(), ErrorCode::ProcessSpawn);
    let error = run(&config, "/nonexistent/program").unwrap_err();
    assert_eq!(error.code(), ErrorCode::ProcessSpawn);
}

// SPEC §16.1-c: no /bin/sh fallback for a file execve refuses.
#[test]
fn a_file_without_a_known_format_is_not_run_by_a_shell() {
    let dir = temp_dir("no-shebang");
    let script = dir.join("script");
    std::fs::write(&script, "echo ran-by-a-shell\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let result = run(&config(&["process.spawn"]), &script.display().to_string());
    std::fs::remove_dir_all(&dir).unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.code(), ErrorCode::ProcessSpawn);
    assert!(
        error.context()[0].contains("Exec format error"),
        "{error:?}"
    );
}

/// A token with no wake descriptor: the host must fall back to a tick.
struct FlagOnly(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl quirl_lua_reference_parent::cancel::CancelSignal for FlagOnly {
    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

#[test]
fn a_token_without_a_wake_descriptor_still_cancels_promptly() {
    let mark = marker();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let canceller = {
        let flag = std::sync::Arc::clone(&flag);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        })
    };
    let started = Instant::now();
    let error = run_command(
        &config(&["process.spawn:sleep"]),
        &request(&format!("sleep {mark}"), Duration::from_secs(60)),
        &FlagOnly(flag),
    )
    .unwrap_err();
    canceller.join().unwrap();
    assert!(error.message().contains("cancelled"));
    assert!(started.elapsed() < Duration::from_millis(200) + PROMPTLY);
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
}

#[test]
fn a_tree_that_keeps_forking_session_escapees_leaves_nothing() {
    let mark = marker();
    let started = Instant::now();
    let result = run_command(
        &config(&["process.spawn"]),
        &request(
            &format!("sh -c 'while :; do setsid sleep {mark} & done'"),
            Duration::from_millis(200),
        ),
        &Cancel::new(),
    );
    match result {
        // Killed at its deadline, still forking ...
        Err(error) => assert_eq!(error.code(), ErrorCode::ResourceLimit, "{error:?}"),
        // ... or stopped by its process limit first (DESIGN §16.7: 256 by
        // default, where a pids controller can be written).
        Ok(outcome) => assert!(outcome.stderr.contains("fork"), "{outcome:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(200) + PROMPTLY);
    assert_eq!(leftovers(&mark), Vec::<u32>::new());
}

#[test]
fn endless_output_is_drained_until_the_deadline_then_killed() {
    let started = Instant::now();
    let error = run_command(
        &config(&["process.spawn:yes"]),
        &request("yes", Duration::from_millis(300)),
        &Cancel::new(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    assert!(error.message().contains("deadline"));
    assert!(
        error
            .context()
            .iter()
            .any(|line| line.contains("stdout retained 65536")),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(300) + PROMPTLY);
}
