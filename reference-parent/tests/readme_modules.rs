//! README.md's module table names exactly the modules of `src/`: every
//! module file or directory is in the table, and every module the table
//! names exists. Top-level modules are `name`, submodules `parent::name`.
//!
//! README.md and `src/` ship in the package, so this runs in the unpacked
//! crate too (the same check as the reference worker's; each published
//! package carries its own copy, as neither depends on the other).
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
