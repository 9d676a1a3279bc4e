//! A grant means exactly one program (DESIGN §16.6 "Exactly one program",
//! issue 38): the exec guard lets the granted program's own exec through
//! and refuses every later `execve`/`execveat` of its tree with `EPERM`, so
//! the routes a careful attacker found with a single grant all fail and run
//! nothing — the dynamic loader run directly (through a launcher, `gcc
//! -wrapper`, `make SHELL=`, `git --exec-path` and a symbolic link) and a
//! program copied into a `memfd`. The loader is in each program's Landlock
//! execute ruleset (a dynamic program cannot start without it), so only the
//! guard stops these.
//!
//! Every escape also runs under the unscoped grant `process.spawn`, which
//! applies no guard: there it succeeds, so each test shows the escape is
//! real on this machine and that the guard is what stops it. Programs the
//! tests need (`gcc`, `make`, `git`) are installed by `.ci/run`, which then
//! requires them (`QUIRL_TEST_REQUIRE=…,programs`); elsewhere a test
//! without its program skips, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    CommandOutcomeData, Environment, ErrorCode, Grants, HostError, ProcessAccess,
    ProcessHostConfig, ProcessRequest, exec_guard_support, run_command,
};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The glibc loader of this architecture, which every dynamic program
/// names as its interpreter.
fn loader() -> Option<&'static str> {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|path| Path::new(path).exists())
}

/// A fresh directory for one test; removed on drop. `work` is the
/// commands' working directory (writable to them, so the marker each
/// escape tries to create there could be written: only the guard stops
/// it), and `bin` holds the test's programs (outside it: a program beneath
/// a writable directory may not be granted).
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "quirl-exec-guard-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        for dir in ["work", "bin"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        Self { root }
    }

    fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }

    /// Where the escapes write their marker.
    fn marker(&self) -> PathBuf {
        self.work().join("ran")
    }

    fn ran(&self) -> bool {
        self.marker().exists()
    }

    fn reset(&self) {
        let _ = std::fs::remove_file(self.marker());
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The guard in force, or a printed reason to skip.
fn guard_or_skip(test: &str) -> bool {
    match exec_guard_support() {
        Ok(()) => true,
        Err(why) => {
            quirl_lua_testkit::environment::skip("exec-guard", test, why);
            false
        }
    }
}

/// A program on `PATH`, or a printed reason to skip (a failure where the
/// run requires the test programs).
fn program_or_skip(test: &str, name: &str) -> bool {
    let found = PATH
        .split(':')
        .any(|dir| Path::new(dir).join(name).is_file());
    if !found {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            &format!("`{name}` is not installed here"),
        );
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
        Environment::empty().with("PATH", PATH).unwrap(),
        cwd,
    )
    .unwrap()
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

/// Compile `source` with `gcc` into the scratch's `bin/` (a dynamic
/// program: its Landlock ruleset holds the loader).
fn compile(scratch: &Scratch, name: &str, source: &str) -> PathBuf {
    let file = scratch.root.join(format!("{name}.c"));
    std::fs::write(&file, source).unwrap();
    let program = scratch.bin(name);
    let status = std::process::Command::new("gcc")
        .arg("-o")
        .arg(&program)
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success(), "gcc failed on {name}.c");
    program
}

/// `command` escapes under the unscoped grant (the control: no guard) and
/// runs nothing under `grant`: the marker is never created, and the
/// outcome (or error) is returned for the caller's checks.
fn escape_is_refused(
    scratch: &Scratch,
    grant: &str,
    command: &str,
) -> Result<CommandOutcomeData, HostError> {
    let open = config_in(&["process.spawn"], &scratch.work());
    let outcome = run(&open, command).unwrap();
    assert!(
        scratch.ran(),
        "without the guard `{command}` should have run the marker: {outcome:?}"
    );
    scratch.reset();
    let granted = config_in(&[grant], &scratch.work());
    let result = run(&granted, command);
    assert!(!scratch.ran(), "`{command}` escaped its grant: {result:?}");
    result
}

/// The refusal is the guard's: `EPERM` ("Operation not permitted"), not
/// Landlock's `EACCES`.
fn refused_by_the_guard(result: &Result<CommandOutcomeData, HostError>) {
    let outcome = result.as_ref().unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    assert!(
        outcome.stderr.contains("Operation not permitted"),
        "{outcome:?}"
    );
}

const LAUNCHER: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc;
    execv(argv[1], argv + 1);
    perror("execv");
    return 3;
}
"#;

const MEMFD_EXEC: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    (void)argc;
    int source = open(argv[1], O_RDONLY);
    int copy = memfd_create("copy", MFD_CLOEXEC);
    if (source < 0 || copy < 0) { perror("open"); return 4; }
    char buffer[65536];
    ssize_t count;
    while ((count = read(source, buffer, sizeof buffer)) > 0) {
        if (write(copy, buffer, (size_t)count) != count) { perror("write"); return 4; }
    }
    fexecve(copy, argv + 1, environ);
    perror("fexecve");
    return 3;
}
"#;

// DESIGN §16.6-a: a program granted by name cannot start another.
// DESIGN §16.6-b: exactly one program.
#[test]
fn the_loader_run_by_a_granted_program_runs_nothing() {
    let test = "the_loader_run_by_a_granted_program_runs_nothing";
    if !guard_or_skip(test) || !program_or_skip(test, "gcc") {
        return;
    }
    let Some(loader) = loader() else {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            "no glibc dynamic loader at a known path",
        );
        return;
    };
    let scratch = Scratch::new("loader");
    let launcher = compile(&scratch, "launch", LAUNCHER);
    let command = format!(
        "{} {loader} /usr/bin/touch {}",
        launcher.display(),
        scratch.marker().display()
    );
    let result = escape_is_refused(
        &scratch,
        &format!("process.spawn:{}", launcher.display()),
        &command,
    );
    refused_by_the_guard(&result);
    // The launcher itself runs: its one exec is the granted program.
    let granted = config_in(
        &[&format!("process.spawn:{}", launcher.display())],
        &scratch.work(),
    );
    let outcome = run(&granted, &format!("{} /bin/true", launcher.display())).unwrap();
    assert!(
        outcome.stderr.contains("execv: Operation not permitted"),
        "{outcome:?}"
    );
    assert_eq!(outcome.status, 3, "{outcome:?}");
}

// DESIGN §16.6-b: exactly one program.
#[test]
fn a_program_copied_into_a_memfd_is_not_executed() {
    let test = "a_program_copied_into_a_memfd_is_not_executed";
    if !guard_or_skip(test) || !program_or_skip(test, "gcc") {
        return;
    }
    let scratch = Scratch::new("memfd");
    let program = compile(&scratch, "memfd-exec", MEMFD_EXEC);
    let command = format!(
        "{} /usr/bin/touch touch {}",
        program.display(),
        scratch.marker().display()
    );
    let result = escape_is_refused(
        &scratch,
        &format!("process.spawn:{}", program.display()),
        &command,
    );
    let outcome = result.unwrap();
    assert_eq!(outcome.status, 3, "{outcome:?}");
    assert!(
        outcome.stderr.contains("fexecve: Operation not permitted"),
        "{outcome:?}"
    );
}

// DESIGN §16.6-b: exactly one program.
#[test]
fn gcc_cannot_run_the_loader_as_its_wrapper() {
    let test = "gcc_cannot_run_the_loader_as_its_wrapper";
    if !guard_or_skip(test) || !program_or_skip(test, "gcc") {
        return;
    }
    let Some(loader) = loader() else {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            "no glibc dynamic loader at a known path",
        );
        return;
    };
    let scratch = Scratch::new("gcc");
    std::fs::write(scratch.work().join("a.c"), "int main(void) { return 0; }\n").unwrap();
    // `-wrapper PROG,ARGS` runs `PROG ARGS cc1 …`: the loader, told to run
    // `touch MARKER -- cc1 …` (the `--` keeps cc1's options file names).
    let command = format!(
        "gcc -wrapper {loader},/usr/bin/touch,{},-- -c a.c -o a.o",
        scratch.marker().display()
    );
    let result = escape_is_refused(&scratch, "process.spawn:gcc", &command);
    let outcome = result.unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    assert!(
        outcome.stderr.contains("Operation not permitted"),
        "{outcome:?}"
    );
}

// DESIGN §16.6-b: exactly one program.
#[test]
fn make_cannot_run_the_loader_as_its_shell() {
    let test = "make_cannot_run_the_loader_as_its_shell";
    if !guard_or_skip(test) || !program_or_skip(test, "make") {
        return;
    }
    let Some(loader) = loader() else {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            "no glibc dynamic loader at a known path",
        );
        return;
    };
    let scratch = Scratch::new("make");
    let makefile = format!("all:\n\t{}\n", scratch.marker().display());
    std::fs::write(scratch.work().join("Makefile"), &makefile).unwrap();
    // The recipe line becomes `LOADER /usr/bin/touch MARKER`.
    let command = format!("make SHELL={loader} .SHELLFLAGS=/usr/bin/touch");
    let result = escape_is_refused(&scratch, "process.spawn:make", &command);
    refused_by_the_guard(&result);
}

// DESIGN §16.6-b: exactly one program.
#[test]
fn git_cannot_run_the_loader_through_exec_path_and_a_symlink() {
    let test = "git_cannot_run_the_loader_through_exec_path_and_a_symlink";
    if !guard_or_skip(test) || !program_or_skip(test, "git") {
        return;
    }
    let Some(loader) = loader() else {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            "no glibc dynamic loader at a known path",
        );
        return;
    };
    let scratch = Scratch::new("git");
    // What git itself can write (a checked-out symbolic link): `git-x`
    // pointing at the loader, in a directory named as git's exec path.
    let helpers = scratch.root.join("helpers");
    std::fs::create_dir_all(&helpers).unwrap();
    std::os::unix::fs::symlink(loader, helpers.join("git-x")).unwrap();
    let command = format!(
        "git --exec-path={} x /usr/bin/touch {}",
        helpers.display(),
        scratch.marker().display()
    );
    let result = escape_is_refused(&scratch, "process.spawn:git", &command);
    let outcome = result.unwrap();
    assert_ne!(outcome.status, 0, "{outcome:?}");
    assert!(
        outcome.stderr.contains("Operation not permitted")
            || outcome.stderr.contains("cannot exec"),
        "{outcome:?}"
    );
}

/// DESIGN §16.2 "Identity": `x86_64` is `setarch` under another name (a
/// link to it), so the loader trick through it cannot even be granted.
#[test]
fn setarch_under_another_name_is_refused_at_grant_time() {
    let test = "setarch_under_another_name_is_refused_at_grant_time";
    let mut tried = 0;
    for alias in ["x86_64", "i386", "linux64", "linux32"] {
        if !PATH
            .split(':')
            .any(|dir| Path::new(dir).join(alias).exists())
        {
            continue;
        }
        let scratch = Scratch::new(alias);
        let error = ProcessHostConfig::new(
            ProcessAccess {
                allow_process: true,
                process_enabled: true,
            },
            Grants::parse([format!("process.spawn:{alias}")]).unwrap_or_default(),
            Environment::empty().with("PATH", PATH).unwrap(),
            scratch.work(),
        )
        .err();
        let error = match Grants::parse([format!("process.spawn:{alias}")]) {
            Err(error) => error,
            Ok(_) => error.unwrap_or_else(|| panic!("`{alias}` was granted")),
        };
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error:?}");
        assert!(
            error.message().contains("would grant every program"),
            "{error:?}"
        );
        tried += 1;
    }
    if tried == 0 {
        quirl_lua_testkit::environment::skip(
            "programs",
            test,
            "no setarch alias is installed here",
        );
    }
}

/// What a plain grant allows: the program itself, with any arguments.
#[test]
fn granted_programs_that_start_nothing_work_normally() {
    let test = "granted_programs_that_start_nothing_work_normally";
    if !guard_or_skip(test) {
        return;
    }
    let scratch = Scratch::new("works");
    std::fs::write(scratch.work().join("lines"), "one\ntwo\nthree\n").unwrap();
    let config = config_in(
        &[
            "process.spawn:sed",
            "process.spawn:sort",
            "process.spawn:tar",
        ],
        &scratch.work(),
    );
    let outcome = run(&config, "sed -n s/t/T/p lines").unwrap();
    assert_eq!(
        (outcome.status, outcome.stdout.as_str()),
        (0, "Two\nThree\n")
    );
    let outcome = run(&config, "sort -r lines").unwrap();
    assert_eq!(outcome.stdout, "two\nthree\none\n", "{outcome:?}");
    let outcome = run(&config, "tar -cf out.tar lines").unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    assert!(scratch.work().join("out.tar").exists());
}

#[test]
fn the_unscoped_grant_runs_without_the_guard() {
    // `process.spawn` grants every program: a shell may start others.
    let scratch = Scratch::new("unscoped");
    let config = config_in(&["process.spawn"], &scratch.work());
    let outcome = run(&config, "sh -c 'echo one; /bin/echo two'").unwrap();
    assert_eq!(outcome.stdout, "one\ntwo\n", "{outcome:?}");
}

/// The guard's one exec is the program's own, interpreter included: a
/// granted script whose interpreter is not a programming environment runs.
#[test]
fn a_granted_script_runs_its_interpreter_in_the_same_exec() {
    let test = "a_granted_script_runs_its_interpreter_in_the_same_exec";
    if !guard_or_skip(test) {
        return;
    }
    let scratch = Scratch::new("script");
    let script = scratch.bin("greet");
    std::fs::write(&script, "#!/usr/bin/cat\nhello from a script\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = config_in(
        &[&format!("process.spawn:{}", script.display())],
        &scratch.work(),
    );
    let outcome = run(&config, &script.display().to_string()).unwrap();
    assert_eq!(outcome.status, 0, "{outcome:?}");
    assert!(
        outcome.stdout.contains("hello from a script"),
        "{outcome:?}"
    );
}
