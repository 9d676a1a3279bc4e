#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Replays every committed fuzz corpus file and crash regression through
//! the same target functions the libFuzzer harness runs (`quirl_lua_testkit`), on
//! the stable toolchain, so a regression fails `cargo test`.
//!
//! Layout: `fuzz/corpus/<target>/<file>` (seeds, see `fuzz/seed_corpus.py`)
//! and `fuzz/artifacts-regressions/<target>/<file>` (minimized crash inputs
//! of bugs that were fixed).

use quirl_lua_testkit::{sessions, targets};

use std::path::{Path, PathBuf};

type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("decoder_chunking", targets::decoder_chunking),
    ("parent_frame", targets::parent_frame),
    ("worker_frame", targets::worker_frame),
    ("round_trip", targets::round_trip),
    ("validation", targets::validation),
    ("strictness", targets::strictness),
    ("parent_session", sessions::parent_session),
    ("worker_session", sessions::worker_session),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Files of `dir` whose names start with `prefix`. In `corpus/` only the
/// committed `seed-*` files are replayed: a local fuzzer run may be adding
/// and removing its own finds there at the same time.
fn files_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.is_file()
                && path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with(prefix))
        })
        .collect();
    files.sort();
    files
}

/// Targets whose inputs are not protocol records: replayed by the crate
/// they exercise, which needs the reference worker and mlua
/// (`lua_programs`: `reference-worker/tests/generated_programs.rs`;
/// `pattern_differential`: `reference-worker/tests/pattern_fuzz_replay.rs`).
const REPLAYED_ELSEWHERE: &[&str] = &["lua_programs", "pattern_differential"];

/// Replay `fuzz/<root>/<target>/<prefix>*` through each target. The root
/// directory must exist (it is committed, with a README, even while it holds
/// no input), so a moved or deleted directory fails instead of replaying
/// nothing; a subdirectory that names no target fails too.
fn replay(root: &str, prefix: &str, require_files: bool) -> usize {
    let base = fuzz_dir().join(root);
    let entries = std::fs::read_dir(&base).unwrap_or_else(|error| {
        panic!(
            "fuzz/{root} must exist (it is committed with a README): {}: {error}",
            base.display()
        )
    });
    let mut total = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if !path.is_dir() {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            TARGETS.iter().any(|(target, _)| *target == name)
                || REPLAYED_ELSEWHERE.contains(&name.as_str()),
            "{root}/{name} names no fuzz target"
        );
    }
    for (name, target) in TARGETS {
        let files = files_in(&base.join(name), prefix);
        if require_files {
            assert!(!files.is_empty(), "{root}/{name} has no committed inputs");
        }
        for file in files {
            let data = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{} fails target {name}", file.display());
            total += 1;
        }
    }
    total
}

#[test]
fn every_committed_corpus_file_passes_its_target() {
    let replayed = replay("corpus", "seed-", true);
    assert!(replayed >= TARGETS.len(), "only {replayed} corpus files");
}

#[test]
fn every_committed_crash_regression_passes_its_target() {
    // Holds only its README until a crash is found; each fixed crash adds
    // a file under `artifacts-regressions/<target>/`. `replay` fails if the
    // directory itself (kept in git by its README) is missing.
    let replayed = replay("artifacts-regressions", "", false);
    eprintln!("replayed {replayed} crash regressions");
}

#[test]
fn empty_and_tiny_inputs_pass_every_target() {
    for (_, target) in TARGETS {
        for data in [&[][..], &[0], &[0xff], &[0, 0, 0, 1, b'1'], &[0xff; 64]] {
            target(data);
        }
    }
}

/// The hand-made happy-path seeds really walk through every live state, so
/// a change to the generator that breaks their byte mapping is noticed.
#[test]
fn session_happy_path_seeds_reach_every_live_state() {
    use quirl_lua_protocol::SessionState::*;
    let expected = vec![Initializing, Ready, Busy, HostCallPending, Busy, Ready];
    for (name, trace) in [
        (
            "worker_session",
            sessions::worker_session_trace as fn(&[u8]) -> Vec<_>,
        ),
        ("parent_session", sessions::parent_session_trace),
    ] {
        let seeds = files_in(&fuzz_dir().join("corpus").join(name), "seed-happy-path");
        assert_eq!(seeds.len(), 1, "{name}: one happy-path seed expected");
        let data = std::fs::read(&seeds[0]).unwrap();
        assert_eq!(trace(&data), expected, "{name}");
    }
}
