//! Programs are judged by what they are, not by their name (DESIGN §16.2
//! "Identity", issue 38): a programming environment stays refused at grant
//! time under Debian's other names for it — a versioned name
//! (`perl5.36-x86_64-linux-gnu`), a package variant (`vim.basic`), an
//! alternative (`editor` → `/etc/alternatives/editor` → `vim.basic`) — and
//! a script whose `#!` line names one (`prove` → `perl`, `pydoc3` →
//! `python3`) is refused for its interpreter.
//!
//! `.ci/run` installs `perl`, `vim` and `python3` and then requires them
//! (`QUIRL_TEST_REQUIRE=…,programs`); elsewhere a name that is not
//! installed is skipped, saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use quirl_lua_reference_parent::process_host::{
    Environment, ErrorCode, Grants, HostError, ProcessAccess, ProcessHostConfig,
};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where `name` is on [`PATH`], if anywhere.
fn find(name: &str) -> Option<PathBuf> {
    PATH.split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists())
}

/// Granting `name` fails with `invalid_argument` at grant time: when the
/// grant strings are parsed (by spelling) or when the configuration is
/// built (by the file it resolves to).
fn refusal(name: &str) -> HostError {
    let grant = format!("process.spawn:{name}");
    match Grants::parse([&grant]) {
        Err(error) => error,
        Ok(grants) => ProcessHostConfig::new(
            ProcessAccess {
                allow_process: true,
                process_enabled: true,
            },
            grants,
            Environment::empty().with("PATH", PATH).unwrap(),
            std::env::temp_dir(),
        )
        .err()
        .unwrap_or_else(|| panic!("`{name}` was granted")),
    }
}

fn assert_refused(name: &str) {
    let error = refusal(name);
    assert_eq!(
        error.code(),
        ErrorCode::InvalidArgument,
        "{name}: {error:?}"
    );
    assert!(
        error.message().contains("would grant every program"),
        "{name}: {error:?}"
    );
}

/// `name`, or a printed reason to skip (a failure where the run requires
/// the test programs).
fn installed_or_skip(test: &str, name: &str) -> bool {
    if find(name).is_some() {
        return true;
    }
    quirl_lua_testkit::environment::skip(
        "programs",
        test,
        &format!("`{name}` is not installed here"),
    );
    false
}

#[test]
fn versioned_perl_names_are_refused() {
    let test = "versioned_perl_names_are_refused";
    if !installed_or_skip(test, "perl") {
        return;
    }
    let mut names: Vec<String> = Vec::new();
    for dir in PATH.split(':') {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("perl5") {
                names.push(name);
            }
        }
    }
    assert!(
        !names.is_empty(),
        "perl is installed but no perl5.* name is"
    );
    for name in &names {
        assert_refused(name);
    }
    assert_refused("perl");
}

#[test]
fn vim_under_its_package_and_alternative_names_is_refused() {
    let test = "vim_under_its_package_and_alternative_names_is_refused";
    if !installed_or_skip(test, "vim.basic") {
        return;
    }
    for name in ["vim.basic", "vim", "vimdiff", "rview", "view", "ex"] {
        if find(name).is_some() {
            assert_refused(name);
        }
    }
    // `editor` is an alternative: refused where it resolves to vim (on a
    // machine where it is nano, it is not a programming environment).
    if let Some(editor) = find("editor") {
        let target = std::fs::canonicalize(&editor).unwrap();
        let name = target.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("vim") {
            assert_refused("editor");
        } else {
            eprintln!(
                "`editor` is `{}` here, which is not refused",
                target.display()
            );
        }
    }
}

/// The same mechanism on a chain of links this test makes itself, so it
/// holds whatever `editor` is on this machine: two hops through an
/// "alternatives" directory to a refused program, under harmless names.
#[test]
fn an_alternative_of_a_refused_program_is_refused_by_its_target() {
    let dir = std::env::temp_dir().join(format!("quirl-alternative-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("alternatives")).unwrap();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::os::unix::fs::symlink("/bin/sh", dir.join("alternatives/editor")).unwrap();
    std::os::unix::fs::symlink(dir.join("alternatives/editor"), dir.join("bin/editor")).unwrap();
    let grants = Grants::parse(["process.spawn:editor"]).unwrap();
    let error = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        grants,
        Environment::empty()
            .with("PATH", dir.join("bin").as_os_str())
            .unwrap(),
        dir.join("work"),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error:?}");
    assert!(
        error
            .context()
            .iter()
            .any(|line| line.contains("programming environment")),
        "{error:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn scripts_of_refused_interpreters_are_refused() {
    let test = "scripts_of_refused_interpreters_are_refused";
    for name in ["prove", "pydoc3"] {
        if !installed_or_skip(test, name) {
            continue;
        }
        let error = refusal(name);
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{name}: {error:?}"
        );
        assert!(
            error
                .context()
                .iter()
                .any(|line| line.contains("a script run by")),
            "{name}: {error:?}"
        );
    }
}

/// Through the CLI: a refused grant is a usage error before anything
/// starts (exit 2), naming the file it resolved to.
#[test]
fn the_cli_refuses_such_a_grant_before_anything_starts() {
    let test = "the_cli_refuses_such_a_grant_before_anything_starts";
    if !installed_or_skip(test, "prove") {
        return;
    }
    let output = Command::new(CLI)
        .args([
            "--allow-process",
            "--grant",
            "process.spawn:prove",
            "eval",
            "return 1",
        ])
        .env("PATH", PATH)
        .env_remove("QUIRL_LUA_WORKER")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("would grant every program"), "{stderr}");
    assert!(stderr.contains("perl"), "{stderr}");
}

/// Ordinary programs are still grantable, by name and by path.
#[test]
fn ordinary_programs_stay_grantable() {
    for name in ["echo", "cat", "git", "sed", "tar", "/bin/ls"] {
        if !name.starts_with('/') && find(name).is_none() {
            continue;
        }
        let grants = Grants::parse([format!("process.spawn:{name}")]).unwrap();
        ProcessHostConfig::new(
            ProcessAccess {
                allow_process: true,
                process_enabled: true,
            },
            grants,
            Environment::empty().with("PATH", PATH).unwrap(),
            std::env::temp_dir(),
        )
        .unwrap_or_else(|error| panic!("`{name}`: {error:?}"));
    }
}
