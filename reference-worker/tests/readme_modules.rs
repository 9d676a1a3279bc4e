//! README.md's module table names exactly the modules of `src/`: every
//! module file or directory is in the table, and every module the table
//! names exists. Top-level modules are `name`, submodules `parent::name`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The module paths under `dir`, `prefix` being the parent module's path.
fn modules_in(dir: &Path, prefix: &str, found: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("read a src/ entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name");
        let (module, nested) = if path.is_dir() {
            (name.to_owned(), true)
        } else if let Some(stem) = name.strip_suffix(".rs") {
            (stem.to_owned(), false)
        } else {
            continue;
        };
        // The crate roots and a directory module's own file are not modules
        // of their own.
        if (prefix.is_empty() && (module == "lib" || module == "main")) || module == "mod" {
            continue;
        }
        let full = if prefix.is_empty() {
            module
        } else {
            format!("{prefix}::{module}")
        };
        if nested {
            modules_in(&path, &full, found);
        }
        found.insert(full);
    }
}

/// The backticked names of the first column of the table under `## Modules`.
fn modules_in_readme(readme: &str) -> BTreeSet<String> {
    let table = readme
        .lines()
        .skip_while(|line| line.trim() != "## Modules")
        .skip(1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2); // the header and the separator row
    let mut named = BTreeSet::new();
    for row in table {
        let first = row.split('|').nth(1).unwrap_or_default();
        named.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    named
}

#[test]
fn readme_module_table_names_exactly_the_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).expect("read README.md");
    let mut actual = BTreeSet::new();
    modules_in(&root.join("src"), "", &mut actual);
    let named = modules_in_readme(&readme);
    assert!(!named.is_empty(), "README.md has no `## Modules` table");

    let missing: Vec<_> = actual.difference(&named).collect();
    let stale: Vec<_> = named.difference(&actual).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's module table is out of date:\n  \
         modules of src/ not in the table: {missing:?}\n  \
         named in the table but not in src/: {stale:?}"
    );
}

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
