//! The conformance suites against our own peers: `quirl-worker` (and
//! `quirl-lua --internal-lua-worker-v1`) must pass the whole worker suite,
//! `quirl-lua` the whole parent suite, with no expected-failures list.
//!
//! The peers live in other packages of the workspace, so Cargo does not
//! build them for this test: it runs `cargo build` for them itself, with the
//! same profile and target directory as this test binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// The suites are timing-sensitive and use both cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn runner() -> &'static str {
    env!("CARGO_BIN_EXE_quirl-conformance")
}

/// `target/<profile>`, derived from this test binary (`target/<profile>/deps/…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Build `quirl-worker` and `quirl-lua` with this test's profile and target
/// directory; return that directory.
fn peers() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(dir) = built.as_ref() {
        return dir.clone();
    }
    let dir = profile_dir();
    let target_dir = dir.parent().unwrap();
    let profile = dir.file_name().unwrap().to_str().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "-p",
            "quirl-lua-reference-worker",
            "-p",
            "quirl-lua-reference-parent",
            "--bins",
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let status = command.status().expect("cargo runs");
    assert!(status.success(), "building the peers failed: {status}");
    for name in ["quirl-worker", "quirl-lua"] {
        assert!(
            dir.join(name).is_file(),
            "{} missing",
            dir.join(name).display()
        );
    }
    *built = Some(dir.clone());
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(runner())
        .args(args)
        .output()
        .expect("runner starts")
}

fn report(output: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn failures(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with("PASS "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Run one whole suite against `peer`; every case must pass (no expected
/// failures, none skipped) and the suite must have at least `min_cases`.
fn assert_whole_suite_passes(suite: &str, peer: &str, min_cases: usize) {
    let dir = peers();
    let _serial = serial();
    let peer = dir.join(peer);
    let output = run(&[suite, "--", peer.to_str().unwrap()]);
    assert!(output.status.success(), "{}", failures(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text.lines().last().unwrap();
    assert!(
        summary.contains(" 0 failed, 0 expected failures, 0 skipped"),
        "{summary}"
    );
    let cases: usize = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(cases >= min_cases, "{summary}");
}

#[test]
fn reference_worker_passes_the_whole_worker_suite() {
    assert_whole_suite_passes("worker", "quirl-worker", 150);
}

#[test]
fn reference_parent_passes_the_whole_parent_suite() {
    assert_whole_suite_passes("parent", "quirl-lua", 40);
}

#[test]
fn worker_mode_of_the_cli_passes_the_session_cases() {
    let dir = peers();
    let _serial = serial();
    let parent = dir.join("quirl-lua");
    let output = run(&[
        "worker",
        "--filter",
        "session.",
        "--",
        parent.to_str().unwrap(),
        "--internal-lua-worker-v1",
    ]);
    assert!(output.status.success(), "{}", failures(&output));
}

#[test]
fn a_broken_worker_fails_and_expected_failures_make_it_pass_until_stale() {
    let _serial = serial();
    let filter = "session.request_before_initialize";
    // `true` exits 0 at once: it never rejects anything.
    let output = run(&["worker", "--filter", filter, "--", "/bin/true"]);
    assert_eq!(output.status.code(), Some(1), "{}", report(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL session.request_before_initialize_is_rejected: ")),
        "{text}"
    );

    let dir = std::env::temp_dir().join(format!("quirl-conformance-xfail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("expected.txt");
    std::fs::write(
        &list,
        "# /bin/true is not a worker\nsession.request_before_initialize_is_rejected # exits 0\n",
    )
    .unwrap();
    let output = run(&[
        "worker",
        "--filter",
        filter,
        "--expected-failures",
        list.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert!(output.status.success(), "{}", report(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("XFAIL session.request_before_initialize_is_rejected: "),
        "{}",
        report(&output)
    );

    // Listed but passing (a worker that does reject it): the list is stale.
    let dir_peers = peers();
    let worker = dir_peers.join("quirl-worker");
    let output = run(&[
        "worker",
        "--filter",
        filter,
        "--expected-failures",
        list.to_str().unwrap(),
        "--json",
        "--",
        worker.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", report(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["summary"]["failed"], 1, "{json}");
    assert!(
        json["cases"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("stale"),
        "{json}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
