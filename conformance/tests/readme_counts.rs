//! The case counts `conformance/README.md` states are the binary's: its
//! `--version` lines (the SPEC.md revision included), the worker suite's total in the examples, one count
//! per case file in the suite table (the fixture-derived row is the rest),
//! and the parent suite's total. A case added without the README's count
//! following fails here; `UPDATE_README_COUNTS=1 cargo test -p
//! quirl-lua-conformance --test readme_counts` rewrites the counts (review
//! the diff), and a new `cases/worker-*.json` file needs a row of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The counts of `quirl-conformance --version`.
#[derive(Debug)]
struct Counts {
    worker: u64,
    protocol: u64,
    reference_sandbox: u64,
    sdk: u64,
    protocol_only: u64,
    parent: u64,
}

fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|word| !word.is_empty())
        .map(|word| word.parse().unwrap())
        .collect()
}

fn version_counts() -> (Counts, String, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_quirl-conformance"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let revision = text
        .lines()
        .find_map(|line| line.strip_prefix("checks: SPEC.md revision "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let worker_line = text
        .lines()
        .find(|line| line.starts_with("worker suite: "))
        .unwrap()
        .to_owned();
    let parent_line = text
        .lines()
        .find(|line| line.starts_with("parent suite: "))
        .unwrap()
        .to_owned();
    let worker = numbers(&worker_line);
    let parent = numbers(&parent_line);
    let counts = Counts {
        worker: worker[0],
        protocol: worker[1],
        reference_sandbox: worker[2],
        sdk: worker[3],
        protocol_only: worker[4],
        parent: parent[0],
    };
    (counts, worker_line, parent_line, revision)
}

/// Cases per worker case file (`cases/worker*.json`), by file name.
fn worker_files() -> BTreeMap<String, u64> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(crate_dir().join("cases")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("worker") && name.ends_with(".json")) {
            continue;
        }
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let count = file["cases"].as_array().unwrap().len();
        files.insert(name, u64::try_from(count).unwrap());
    }
    files
}

/// Replace the number of the first `(\d+)` after `prefix` on every line
/// that contains `prefix` and `anchor`, with `value`; the lines changed.
fn set_number(text: &mut String, anchor: &str, prefix: &str, value: u64) -> usize {
    let mut changed = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let Some(at) = line
                .find(anchor)
                .and_then(|_| line.find(prefix))
                .map(|at| at + prefix.len())
            else {
                return line.to_owned();
            };
            let digits = line[at..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(line.len(), |n| at + n);
            if digits == at {
                return line.to_owned();
            }
            changed += 1;
            format!("{}{value}{}", &line[..at], &line[digits..])
        })
        .collect();
    *text = lines.join("\n") + "\n";
    changed
}

/// `text` with the table cell just before `anchor` (a row's last cell)
/// holding `value`.
fn set_cell_before(text: &str, anchor: &str, value: u64) -> String {
    text.lines()
        .map(|line| match line.strip_suffix(anchor) {
            Some(head) => {
                let cell = head
                    .trim_end_matches(' ')
                    .trim_end_matches(|c: char| c.is_ascii_digit());
                format!("{cell}{value} {anchor}")
            }
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The README as it should read, with every count from the binary.
fn expected_readme(readme: &str) -> String {
    let (counts, worker_line, parent_line, revision) = version_counts();
    let files = worker_files();
    let mut text = readme.to_owned();
    let mut edits = Vec::new();
    // The `--version` example.
    let version = |line: &str| format!("# {line}");
    text = text
        .lines()
        .map(|line| {
            if line.starts_with("# worker suite: ") && line.contains("in a --protocol-only run") {
                version(&worker_line)
            } else if line.starts_with("# parent suite: ") {
                version(&parent_line)
            } else if let Some(rest) = line.strip_prefix("# checks: SPEC.md revision ") {
                let after = rest.split_once(' ').map_or("", |(_, after)| after);
                format!("# checks: SPEC.md revision {revision} {after}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    edits.push(set_number(
        &mut text,
        "# worker suite: ",
        "# worker suite: ",
        counts.worker,
    ));
    // The example report of a run with one failure and one expected failure.
    edits.push(set_number(
        &mut text,
        "profile protocol: ",
        "profile protocol: ",
        counts.protocol,
    ));
    edits.push(set_number(
        &mut text,
        "profile protocol: ",
        " cases, ",
        counts.protocol - 2,
    ));
    edits.push(set_number(
        &mut text,
        "profile reference-sandbox: ",
        "profile reference-sandbox: ",
        counts.reference_sandbox,
    ));
    edits.push(set_number(
        &mut text,
        "profile reference-sandbox: ",
        " cases, ",
        counts.reference_sandbox,
    ));
    edits.push(set_number(
        &mut text,
        "expected failures, 0 skipped in 31.0 s",
        "worker suite: ",
        counts.worker,
    ));
    edits.push(set_number(
        &mut text,
        "expected failures, 0 skipped in 31.0 s",
        " cases, ",
        counts.worker - 2,
    ));
    // The suite table.
    edits.push(set_number(
        &mut text,
        "Worker suite (",
        "Worker suite (",
        counts.worker,
    ));
    let mut in_files = 0;
    for (file, count) in &files {
        let anchor = format!("| `cases/{file}` |");
        assert!(
            text.contains(&anchor),
            "cases/{file} has no row in the README's suite table"
        );
        text = set_cell_before(&text, &anchor, *count);
        in_files += count;
    }
    text = set_cell_before(
        &text,
        "| `fixtures/manifest.json` |",
        counts.worker - in_files,
    );
    edits.push(set_number(
        &mut text,
        "Parent suite (",
        "Parent suite (",
        counts.parent,
    ));
    assert!(
        edits.iter().all(|changed| *changed > 0),
        "a count the README must state was not found: {edits:?}"
    );
    let _ = (counts.sdk, counts.protocol_only);
    text
}

#[test]
fn the_readme_states_the_binarys_case_counts() {
    let path: &Path = &crate_dir().join("README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let expected = expected_readme(&readme);
    if std::env::var_os("UPDATE_README_COUNTS").is_some() {
        std::fs::write(path, &expected).unwrap();
        return;
    }
    if expected != readme {
        let diff: Vec<String> = readme
            .lines()
            .zip(expected.lines())
            .filter(|(old, new)| old != new)
            .map(|(old, new)| format!("- {old}\n+ {new}"))
            .collect();
        panic!(
            "conformance/README.md states stale case counts; run \
             `UPDATE_README_COUNTS=1 cargo test -p quirl-lua-conformance --test readme_counts`:\n{}",
            diff.join("\n")
        );
    }
}
