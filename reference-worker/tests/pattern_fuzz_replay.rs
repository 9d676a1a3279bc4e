//! Replays the committed seeds of the `pattern_differential` fuzz target
//! (`fuzz/corpus/pattern_differential/seed-*`, and crash regressions in
//! `fuzz/artifacts-regressions/pattern_differential/`) through the same
//! function libFuzzer runs (`quirl_lua_testkit::patterns`), so `cargo test` checks
//! them against C Lua without nightly (DESIGN §15.4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::patterns;

use std::path::{Path, PathBuf};

fn inputs(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join("pattern_differential");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.is_file()
                && path
                    .file_name()
                    .is_some_and(|name| !name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn committed_pattern_fuzz_inputs_agree_with_c_lua() {
    let seeds: Vec<PathBuf> = inputs("corpus")
        .into_iter()
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("seed-"))
        })
        .collect();
    assert!(seeds.len() >= 10, "only {} seeds", seeds.len());
    for file in seeds.iter().chain(inputs("artifacts-regressions").iter()) {
        let data = std::fs::read(file).unwrap();
        let outcome = std::panic::catch_unwind(|| patterns::pattern_differential(&data));
        assert!(outcome.is_ok(), "{} differs from C Lua", file.display());
    }
}
