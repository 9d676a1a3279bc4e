//! The worker suite against Quirl 0.1's worker (`$QUIRL_BIN
//! --internal-lua-worker-v1`) with its committed expected-failures list
//! (`conformance/expected/quirl-0.1.txt`, SPEC.md §14 and §19): the run must
//! pass, every listed case must still fail (a listed case that passes
//! fails the run: the list is stale), and every entry must name its reason
//! key — an erratum of SPEC.md §14 or the `reference-sandbox` profile.
//!
//! Runs only when `QUIRL_BIN` names a Quirl 0.1 binary (built from Quirl's
//! public source; CI does not build it); otherwise the Quirl run is skipped
//! with a printed reason. The checks of the list itself always run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn runner() -> &'static str {
    env!("CARGO_BIN_EXE_quirl-conformance")
}

fn expected_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("expected/quirl-0.1.txt")
}

/// (case name, reason) of every entry of the list.
fn entries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(expected_file()).unwrap();
    text.lines()
        .filter_map(|line| {
            let (name, reason) = line.split_once('#').unwrap_or((line, ""));
            let name = name.trim();
            (!name.is_empty()).then(|| (name.to_owned(), reason.trim().to_owned()))
        })
        .collect()
}

/// The errata numbers SPEC.md §14 defines (`| E7 | …`).
fn errata() -> BTreeSet<String> {
    let spec =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../SPEC.md")).unwrap();
    let section = spec
        .split("\n## 14. ")
        .nth(1)
        .and_then(|rest| rest.split("\n## 15. ").next())
        .unwrap();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| E"))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(number, _)| format!("E{number}"))
        .collect()
}

#[test]
fn every_entry_names_an_erratum_of_the_spec_or_a_profile_and_a_case_of_the_suite() {
    let errata = errata();
    assert!(
        errata.contains("E1") && errata.contains("E18"),
        "{errata:?}"
    );
    let list = Command::new(runner())
        .args(["worker", "--list"])
        .output()
        .unwrap();
    let cases: Vec<(String, String)> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields[0].to_owned(), fields[2].to_owned())
        })
        .collect();
    let entries = entries();
    assert!(entries.len() > 100, "{}", entries.len());
    for (name, reason) in &entries {
        let (key, text) = reason
            .split_once(':')
            .unwrap_or_else(|| panic!("{name}: the reason `{reason}` has no `KEY:`"));
        assert!(!text.trim().is_empty(), "{name}: no reason after {key}");
        let profile = &cases
            .iter()
            .find(|(case, _)| case == name)
            .unwrap_or_else(|| panic!("{name} is no case of the worker suite"))
            .1;
        if key == "reference-sandbox" {
            assert_eq!(
                profile, "reference-sandbox",
                "{name}: listed as a profile difference"
            );
        } else {
            assert!(
                errata.contains(key),
                "{name}: {key} is no erratum of SPEC.md §14"
            );
            assert_eq!(
                profile, "protocol",
                "{name}: an erratum breaks a requirement on every worker"
            );
        }
    }
}

#[test]
fn quirls_worker_passes_the_worker_suite_with_its_expected_failures() {
    let Some(quirl) = std::env::var_os("QUIRL_BIN").filter(|path| !path.is_empty()) else {
        eprintln!(
            "skipped quirls_worker_passes_the_worker_suite_with_its_expected_failures: QUIRL_BIN is not set (point it at a Quirl 0.1 `quirl` binary; CI does not build Quirl)"
        );
        return;
    };
    let output = Command::new(runner())
        .arg("worker")
        .arg("--expected-failures")
        .arg(expected_file())
        .arg("--")
        .arg(&quirl)
        .arg("--internal-lua-worker-v1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let problems: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(output.status.success(), "{}", problems.join("\n"));
    let xfails = text.lines().filter(|l| l.starts_with("XFAIL ")).count();
    assert_eq!(
        xfails,
        entries().len(),
        "every listed case failed as listed"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("expected failures by reason (E = erratum of SPEC.md §14): E")),
        "{text}"
    );
    assert!(!text.contains("unclassified"), "{text}");
}
