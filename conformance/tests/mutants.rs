//! Each isolating case of the worker suite fails for a worker that breaks
//! exactly its rule, and only that case fails (issue: a worker written
//! from SPEC.md alone passed every case with `-0` read as 0, integers past
//! a double accepted in free-form values and lone surrogates accepted
//! outside a size-checked `source`).
//!
//! The worker is `examples/mutant_worker.rs`: a worker without Lua (SPEC
//! §19.2) that also answers `return <float literal>`, with one defect
//! chosen by `--break MUTATION`. For each mutation the test runs every
//! `--protocol-only` case and the float text cases, and requires the set
//! of failing cases to be exactly the one the mutation names; unmutated,
//! the worker passes all of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use quirl_lua_testkit::bins::example_path;
use quirl_lua_testkit::serial::one_at_a_time;

/// The runs use both cores and are timing-sensitive: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn mutant() -> PathBuf {
    example_path("quirl-lua-conformance", "mutant_worker")
}

/// The float text cases (SPEC §12.1 rule 6); they need a worker that
/// answers floats, so they are not in `--protocol-only` runs.
const FLOAT_TEXT_CASES: &str = "eval.float_text.";

/// The names of the cases that did not pass in one run of the runner.
fn failing(selection: &[&str], mutation: Option<&str>) -> (BTreeSet<String>, usize) {
    let worker = mutant();
    let mut command = Command::new(env!("CARGO_BIN_EXE_quirl-conformance"));
    command
        .arg("worker")
        .arg("--json")
        .args(selection)
        .arg("--");
    command.arg(&worker);
    if let Some(mutation) = mutation {
        command.args(["--break", mutation]);
    }
    let output = command.output().expect("runner starts");
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

/// Every protocol-only case and every float text case that fails for the
/// worker with `mutation`.
fn failing_everywhere(mutation: Option<&str>) -> BTreeSet<String> {
    let _serial = one_at_a_time(&SERIAL);
    let (mut failed, protocol_only) = failing(&["--protocol-only"], mutation);
    assert!(protocol_only > 600, "{protocol_only} protocol-only cases");
    let (float_failed, float_cases) = failing(&["--filter", FLOAT_TEXT_CASES], mutation);
    assert!(float_cases >= 4, "{float_cases} float text cases");
    failed.extend(float_failed);
    failed
}

fn assert_fails_exactly(mutation: &str, expected: &[&str]) {
    let failed = failing_everywhere(Some(mutation));
    let expected: BTreeSet<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(failed, expected, "mutation {mutation}");
}

#[test]
fn the_unmutated_worker_passes_every_case_the_mutants_fail() {
    assert_eq!(failing_everywhere(None), BTreeSet::new());
}

#[test]
fn negative_zero_read_as_zero_fails_only_the_negative_zero_cases() {
    // SPEC §5.6-a: `-0` is wrong_type in an integer member. The older
    // `json.negative_zero_id_is_rejected` and the fixture
    // `integer_id_negative_zero` reuse an id, so they still pass.
    assert_fails_exactly(
        "negative-zero",
        &[
            "json.negative_zero_initialize_id_is_rejected",
            "json.negative_zero_input_byte_is_rejected",
        ],
    );
}

#[test]
fn an_integer_beyond_a_double_accepted_fails_only_its_case() {
    // SPEC §5.1, §5.7: a free-form number outside a double is malformed_json.
    assert_fails_exactly(
        "integer-beyond-a-double",
        &["json.integer_beyond_a_double_in_a_free_form_value_is_rejected"],
    );
}

#[test]
fn an_integer_beyond_u64_refused_fails_only_its_case() {
    // SPEC §5.7: past i64/u64 a free-form integer literal is a double.
    assert_fails_exactly(
        "integer-beyond-u64",
        &["json.integers_beyond_i64_and_u64_in_a_free_form_value_are_accepted"],
    );
}

#[test]
fn lone_surrogates_accepted_outside_a_source_fail_only_the_free_form_cases() {
    // SPEC §5.1-c. The worker still refuses them in a `source`, as a size
    // check in UTF-8 would; the older cases and fixtures put them there.
    assert_fails_exactly(
        "lone-surrogate",
        &[
            "json.lone_high_surrogate_in_a_free_form_value_is_rejected",
            "json.lone_low_surrogate_in_a_free_form_key_is_rejected",
        ],
    );
}

#[test]
fn unsorted_free_form_keys_refused_fail_only_their_case() {
    // SPEC §12.2-a: a receiver MUST accept a non-canonical frame.
    assert_fails_exactly(
        "unsorted-keys",
        &["json.unsorted_keys_in_a_free_form_value_are_accepted"],
    );
}

#[test]
fn a_null_context_refused_fails_only_the_null_context_cases() {
    // SPEC §1.2: `null` is a value of a required `any` member.
    assert_fails_exactly(
        "null-context",
        &[
            "accepts_fixture.render_prompt_null_context",
            "json.null_context_of_complete_is_accepted",
            "json.null_context_of_contribution_is_accepted",
            "json.null_context_of_render_prompt_is_accepted",
        ],
    );
}

#[test]
fn each_float_text_defect_fails_only_its_case() {
    // SPEC §12.1 rule 6, one branch per case.
    for (mutation, case) in [
        (
            "exponent-without-sign",
            "eval.float_text.exponent_from_1e16_with_a_sign",
        ),
        (
            "integral-float-without-fraction",
            "eval.float_text.integral_float_keeps_its_fraction",
        ),
        (
            "exponent-from-1e-5",
            "eval.float_text.fixed_notation_down_to_a_hundred_thousandth",
        ),
        (
            "padded-exponent",
            "eval.float_text.exponent_without_leading_zeros",
        ),
    ] {
        assert_fails_exactly(mutation, &[case]);
    }
}
