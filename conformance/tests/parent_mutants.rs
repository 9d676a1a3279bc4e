//! Each rule the parent suite pins (SPEC §19.3, and the questions a parent
//! written from SPEC.md alone left open: §3.1-f/g, §7.1, §9.5-a/b, §10-c,
//! §11.3, §16.1-e) fails a parent that breaks exactly that rule, and no
//! other case fails for it.
//!
//! The parent is `examples/mutant_parent.rs`: a host on the protocol crate
//! alone that passes the whole parent suite, with one defect chosen by
//! `--break MUTATION`. For each mutation the test runs the parent cases of
//! the categories the rule's cases belong to (the whole suite when the rule
//! touches every session) and requires the set of failing cases to be
//! exactly the rule's. Unmutated, it passes every case.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use quirl_lua_testkit::bins::example_path;
use quirl_lua_testkit::serial::one_at_a_time;

/// The runs are timing-sensitive (bounds of half the wall time) and use
/// both cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn mutant() -> PathBuf {
    example_path("quirl-lua-conformance", "mutant_parent")
}

/// The cases that did not pass in one run (`filter`: a case-name
/// substring, `None` for every case), and how many ran.
fn failing(filter: Option<&str>, mutation: Option<&str>) -> (BTreeSet<String>, usize) {
    let _serial = one_at_a_time(&SERIAL);
    let mut command = Command::new(env!("CARGO_BIN_EXE_quirl-conformance"));
    command.args(["parent", "--json"]);
    if let Some(filter) = filter {
        command.args(["--filter", filter]);
    }
    command.arg("--").arg(mutant());
    if let Some(mutation) = mutation {
        command.args(["--break", mutation]);
    }
    let output = command.output().expect("the runner starts");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON report: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let cases = report["cases"].as_array().unwrap();
    let failed = cases
        .iter()
        .filter(|case| case["status"] != "pass")
        .map(|case| case["name"].as_str().unwrap().to_owned())
        .collect();
    (failed, cases.len())
}

fn assert_fails_exactly(mutation: &str, filter: Option<&str>, expected: &[&str]) {
    let (failed, ran) = failing(filter, Some(mutation));
    assert!(ran >= expected.len().max(1), "{ran} cases ran");
    let expected: BTreeSet<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(failed, expected, "mutation {mutation}");
}

/// The parent cases as data.
fn cases() -> Vec<serde_json::Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/cases/parent.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().clone()
}

/// Whether the case's fake worker reads the `initialize` request (it does
/// unless it exits first).
fn reads_initialize(case: &serde_json::Value) -> bool {
    case["worker"]
        .as_array()
        .unwrap()
        .iter()
        .any(|step| step["read"] == "initialize")
}

#[test]
fn the_unmutated_parent_passes_every_case() {
    let (failed, ran) = failing(None, None);
    assert!(ran >= 100, "{ran} parent cases");
    assert_eq!(failed, BTreeSet::new());
}

#[test]
fn an_oversized_frame_reported_as_a_limit_fails_only_the_oversized_frame_cases() {
    // SPEC §11.3, §19.3-c: a violation (class 4) whose code is
    // resource_limit. The garbage case's first four bytes declare an
    // oversized frame too.
    assert_fails_exactly(
        "resource-limit-violation-as-limit",
        None,
        &[
            "framing.garbage_on_the_protocol_stream_is_rejected",
            "framing.header_one_past_the_maximum_is_rejected",
            "framing.oversized_header_is_rejected",
            "session.oversized_header_during_initialize_is_rejected",
        ],
    );
}

#[test]
fn an_exit_seen_only_at_the_end_of_the_stream_fails_only_the_held_pipe_case() {
    // SPEC §9.5-a.
    assert_fails_exactly(
        "exit-seen-by-end-of-stream-only",
        Some("crash."),
        &["crash.exit_while_a_grandchild_holds_the_pipe"],
    );
}

#[test]
fn a_policy_out_of_range_fails_every_session() {
    // SPEC §10-a, §19.3: the memory and instruction values are the
    // parent's own, within range; the fake worker refuses anything else in
    // every case that reads the initialize.
    let expected: Vec<String> = cases()
        .iter()
        .filter(|case| reads_initialize(case))
        .map(|case| case["name"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_fails_exactly("policy-out-of-range", None, &expected);
}

#[test]
fn invented_grants_fail_every_session_without_a_grant() {
    // SPEC §19.3-b: the grants are exactly the --grant values, null or []
    // without one.
    let expected: Vec<String> = cases()
        .iter()
        .filter(|case| reads_initialize(case))
        .filter(|case| case["grants"].as_array().is_none_or(Vec::is_empty))
        .map(|case| case["name"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_fails_exactly("grants-invented", None, &expected);
}

#[test]
fn no_grant_read_as_every_program_fails_only_the_grantless_host_case() {
    // SPEC §7.1, §16.1-b: with --allow-process and no --grant nothing runs.
    assert_fails_exactly(
        "no-grant-allows-everything",
        Some("host."),
        &["host.allow_process_without_a_grant_runs_nothing"],
    );
}

#[test]
fn truncation_reported_as_a_crash_fails_only_the_truncation_cases() {
    // SPEC §11.3, §19.3-c: a frame cut short is `validation`.
    assert_fails_exactly(
        "truncation-as-crash",
        Some("framing."),
        &[
            "framing.truncated_frame_then_exit_is_a_failure",
            "framing.truncated_header_then_exit_is_a_failure",
        ],
    );
}

#[test]
fn a_failed_initialize_reported_as_a_guest_error_fails_only_its_case() {
    // SPEC §11.3, §19.3-c: exit 4 with the error's code.
    assert_fails_exactly(
        "failed-initialize-as-guest-error",
        Some("session."),
        &["session.failed_initialize_is_reported"],
    );
}

#[test]
fn each_process_host_defect_fails_only_its_cases() {
    // SPEC §19.3-d…j, §16.1-e, each rule of the process host on its own.
    for (mutation, expected) in [
        (
            "host-inherits-environment",
            &[
                "host.command_environment_comes_from_the_grants",
                "host.command_environment_is_path_and_home",
            ][..],
        ),
        (
            "host-runs-in-root",
            &["host.command_runs_in_the_parents_working_directory"],
        ),
        (
            "denied-grant-as-invalid-command",
            &[
                "host.allow_process_without_a_grant_runs_nothing",
                "host.scoped_grant_does_not_match_a_path_to_the_program",
                "host.ungranted_program_gets_an_error_host_response",
            ],
        ),
        // Checking the grant on the raw command, before its form, also
        // compares a quoted program word with its quotes.
        (
            "grant-checked-before-form",
            &[
                "host.command_form_is_checked_before_the_grant",
                "host.scoped_grant_matches_the_first_word_after_quote_removal",
            ],
        ),
        (
            "grant-matches-file-name",
            &["host.scoped_grant_does_not_match_a_path_to_the_program"],
        ),
        (
            "expansions-taken-literally",
            &[
                "host.glob_is_invalid_argument",
                "host.parameter_expansion_is_invalid_argument",
            ],
        ),
        (
            "host-inherits-stdin",
            &["host.command_stdin_is_the_null_device"],
        ),
    ] {
        assert_fails_exactly(mutation, Some("host."), expected);
    }
}

#[test]
fn a_startup_timeout_past_ten_seconds_fails_only_the_silent_initialize_case() {
    // SPEC §10-c.
    assert_fails_exactly(
        "slow-startup",
        Some("liveness."),
        &["liveness.silent_worker_during_initialize_is_ended"],
    );
}

#[test]
fn each_worker_start_and_end_defect_fails_only_its_case() {
    // SPEC §3.1-f, §3.1-g, §9.5-b.
    for (mutation, case) in [
        (
            "worker-inherits-environment",
            "session.worker_environment_is_cleared",
        ),
        (
            "worker-inherits-a-descriptor",
            "session.worker_inherits_no_extra_descriptors",
        ),
        (
            "bytes-after-final-response-judged",
            "session.bytes_after_the_final_response_do_not_change_its_result",
        ),
    ] {
        assert_fails_exactly(mutation, Some("session."), &[case]);
    }
}
