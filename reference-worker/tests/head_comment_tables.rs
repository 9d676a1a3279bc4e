//! DESIGN §15.6: the budget's and the sandbox's head comments map each
//! charge and each guest-visible surface to the tests that check it; every
//! test they name exists. (The README's module table is checked by
//! `.ci/readme_modules.py`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

/// The tests named in the last column of the tables in a head comment
/// (`//!` lines): `FILE::test` for a function of `tests/FILE.rs`,
/// `module::path::tests::test` for a unit test of `src/module/path`.
fn tests_named_in_head_tables(source: &str) -> Vec<String> {
    source
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!").trim())
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .filter_map(|row| row.trim_end_matches('|').rsplit('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|token| token.contains("::"))
        .map(str::to_owned)
        .collect()
}

/// Whether the test `named` (as [`tests_named_in_head_tables`] writes it)
/// is a test function of this crate.
fn test_exists(root: &Path, named: &str) -> bool {
    let (file, name) = match named.split_once("::tests::") {
        Some((module, name)) => {
            let path = module.replace("::", "/");
            let flat = root.join("src").join(format!("{path}.rs"));
            let nested = root.join("src").join(&path).join("mod.rs");
            (if flat.exists() { flat } else { nested }, name)
        }
        None => {
            let (stem, name) = named.split_once("::").expect("FILE::test");
            (root.join("tests").join(format!("{stem}.rs")), name)
        }
    };
    let Ok(text) = fs::read_to_string(&file) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .any(|pair| pair[0] == "#[test]" && pair[1].starts_with(&format!("fn {name}()")))
}

/// DESIGN §15.6: the budget's and the sandbox's head comments map each charge
/// and each guest-visible surface to the tests that check it; every test
/// they name exists (a renamed or removed test fails here, not silently).
#[test]
fn head_comment_tables_name_only_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, at_least) in [("src/budget/mod.rs", 40), ("src/sandbox/mod.rs", 20)] {
        let source = fs::read_to_string(root.join(file)).expect("read a head comment");
        let named = tests_named_in_head_tables(&source);
        assert!(
            named.len() >= at_least,
            "{file} names {} tests in its tables, expected at least {at_least}",
            named.len()
        );
        let missing: Vec<&String> = named.iter().filter(|t| !test_exists(root, t)).collect();
        assert!(
            missing.is_empty(),
            "{file} names tests that do not exist: {missing:?}"
        );
    }
}
