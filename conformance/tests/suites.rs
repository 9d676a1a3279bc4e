//! The conformance suites against our own peers: `quirl-worker` (and
//! `quirl-lua --internal-lua-worker-v1`) must pass the whole worker suite,
//! `quirl-lua` the whole parent suite, with no expected-failures list.
//!
//! The whole suites run from a *copy* of the runner in an empty temporary
//! directory, with that directory as the working directory and no
//! `--fixtures`: the runner must need nothing of the source tree (SPEC.md
//! §19, the installed-binary flow of conformance/README.md).
//!
//! The peers live in other packages of the workspace, so Cargo does not
//! build them for this test: the test kit's `bin_path` runs `cargo build`
//! for them, with the same profile and target directory as this test binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use quirl_lua_testkit::bins::{bin_path, example_path};
use quirl_lua_testkit::serial::one_at_a_time;

/// The suites are timing-sensitive and use both cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn runner() -> &'static str {
    env!("CARGO_BIN_EXE_quirl-conformance")
}

/// Build `quirl-worker` and `quirl-lua` with this test's profile and target
/// directory (`quirl_lua_testkit::bin_path`); return that directory.
fn peers() -> PathBuf {
    bin_path("quirl-lua-cli", "quirl-lua");
    let worker = bin_path("quirl-lua-reference-worker", "quirl-worker");
    worker.parent().unwrap().to_path_buf()
}

/// The runner copied into an empty directory of its own (removed on drop).
struct Installed {
    dir: PathBuf,
    exe: PathBuf,
}

impl Installed {
    fn new(label: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "quirl-conformance-installed-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("quirl-conformance");
        std::fs::copy(runner(), &exe).unwrap();
        Self { dir, exe }
    }

    /// Run the copy with the empty directory as the working directory.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.exe)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("runner starts")
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
    let _serial = one_at_a_time(&SERIAL);
    let peer = dir.join(peer);
    let installed = Installed::new(suite);
    let output = installed.run(&[suite, "--", peer.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_dir(&installed.dir).unwrap().count(),
        1,
        "the runner left files in its working directory"
    );
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
fn version_names_the_case_counts_and_the_spec_revision() {
    let installed = Installed::new("version");
    let output = installed.run(&["--version"]);
    assert!(output.status.success(), "{}", report(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let spec =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../SPEC.md")).unwrap();
    let revision = spec
        .lines()
        .find_map(|line| line.strip_prefix("Revision: "))
        .unwrap();
    assert!(
        text.contains(&format!("SPEC.md revision {revision} ")),
        "{text}"
    );
    let list = installed.run(&["worker", "--list"]);
    let cases = String::from_utf8_lossy(&list.stdout).lines().count();
    assert!(cases > 800, "{cases}");
    assert!(
        text.contains(&format!("worker suite: {cases} cases (")),
        "{text}"
    );
    let parent = installed.run(&["parent", "--list"]);
    let parent_cases = String::from_utf8_lossy(&parent.stdout).lines().count();
    assert!(
        text.contains(&format!("parent suite: {parent_cases} cases")),
        "{text}"
    );
}

#[test]
fn worker_mode_of_the_cli_passes_the_session_cases() {
    let dir = peers();
    let _serial = one_at_a_time(&SERIAL);
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
    let _serial = one_at_a_time(&SERIAL);
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

#[test]
fn the_parent_adapter_example_certifies_a_host_with_another_interface() {
    // SPEC.md §19: a parent whose command line differs is certified through
    // an adapter; conformance/examples/parent_adapter.py adapts the
    // JSON-lines interface of `quirl-lua batch` to the suite's contract.
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed, the adapter example needs it");
        return;
    }
    let dir = peers();
    let _serial = one_at_a_time(&SERIAL);
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/parent_adapter.py");
    let output = Command::new(runner())
        .args(["parent", "--filter", "session.", "--", "python3"])
        .arg(&adapter)
        .env("ADAPTER_HOST", dir.join("quirl-lua"))
        .output()
        .expect("runner starts");
    assert!(output.status.success(), "{}", failures(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text.lines().last().unwrap();
    let cases: usize = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(cases >= 10, "{summary}");
}

#[test]
fn a_worker_without_lua_passes_every_protocol_only_case() {
    // SPEC.md §19.2: the protocol crate's example worker answers by the
    // Lua-free worker contract; `--protocol-only` must pass 100% with it.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/examples/worker.rs");
    if !example.is_file() {
        eprintln!(
            "skipped: {} does not exist, so there is no Lua-free worker to run",
            example.display()
        );
        return;
    }
    let worker = example_path("quirl-lua-protocol", "worker");
    let _serial = one_at_a_time(&SERIAL);
    let installed = Installed::new("protocol-only");
    let output = installed.run(&["worker", "--protocol-only", "--", worker.to_str().unwrap()]);
    assert!(output.status.success(), "{}", failures(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text.lines().last().unwrap();
    assert!(
        summary.contains(" 0 failed, 0 expected failures"),
        "{summary}"
    );
    let cases: usize = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(cases > 500, "{summary}");
    assert!(
        text.lines().any(|l| l
            == format!(
                "profile protocol: {cases} cases, {cases} passed, 0 failed, 0 expected failures"
            )),
        "{text}"
    );
}
