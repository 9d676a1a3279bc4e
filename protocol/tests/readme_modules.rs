//! README.md's module table names exactly the top-level modules of `src/`:
//! every module file or directory is in the table, and every module the
//! table names exists. README.md and `src/` are both in the published
//! package, so this test also runs in the unpacked crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The top-level modules of `src/`: `name.rs` files and `name/`
/// directories, the crate root `lib.rs` left out.
fn modules_in(src: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for entry in fs::read_dir(src).expect("read src/") {
        let path = entry.expect("read a src/ entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name");
        let module = if path.is_dir() {
            name
        } else if let Some(stem) = name.strip_suffix(".rs") {
            stem
        } else {
            continue;
        };
        if module != "lib" {
            found.insert(module.to_owned());
        }
    }
    found
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
    let actual = modules_in(&root.join("src"));
    let named = modules_in_readme(&readme);
    assert!(
        named.contains("blocking") && actual.contains("blocking"),
        "the table and src/ both name `blocking`: {named:?} / {actual:?}"
    );

    let missing: Vec<_> = actual.difference(&named).collect();
    let stale: Vec<_> = named.difference(&actual).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's module table is out of date:\n  \
         modules of src/ not in the table: {missing:?}\n  \
         named in the table but not in src/: {stale:?}"
    );
}

#[test]
fn a_module_missing_from_the_table_or_from_src_is_found() {
    let readme =
        "## Modules\n\n| module | job |\n|---|---|\n| `frame` | framing |\n| `gone` | stale |\n";
    let named = modules_in_readme(readme);
    let actual: BTreeSet<String> = ["frame", "codec"].map(str::to_owned).into();
    assert_eq!(named.difference(&actual).collect::<Vec<_>>(), vec!["gone"]);
    assert_eq!(actual.difference(&named).collect::<Vec<_>>(), vec!["codec"]);
}
