//! The loop inventory (DESIGN §15.6, `LOOPS.md`): every loop and every
//! recursion of the C sources the worker links — Lua 5.4.9 as patched
//! and our meter — and of the Rust code (the worker's, `mlua`'s) that a
//! guest can reach, each with an entry that says how it is bounded. The
//! test extracts them from the sources (`c.rs`, `rust.rs`: tokenizers, see
//! there why they cannot miss one) and fails when a loop has no entry or
//! an entry names no loop, so a Lua upgrade, a new hunk or a new Rust loop
//! cannot add an unclassified loop. `LOOPS_PRINT=1` prints the entries a
//! new source needs, in the inventory's format, to be classified.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod c;
mod rust;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A loop statement (or a backward `goto`).
    Loop,
    /// A call of a library routine that loops (C library, Rust iterators).
    Scan,
    /// A function in a cycle of the call graph.
    Recursion,
}

/// One loop found in the sources.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    pub file: String,
    pub function: String,
    pub kind: Kind,
    /// `for 1`, `while 2`, `strlen 1`, `recursion 1`, …
    pub what: String,
}

impl Item {
    fn key(&self) -> (String, String, String) {
        (self.file.clone(), self.function.clone(), self.what.clone())
    }
}

/// How an entry of the inventory says a loop is bounded.
const CLASSES: &[&str] = &["constant", "charged", "charged-by", "unreachable"];

/// The worker's modules that guest code, or what it returns, reaches
/// (not the process entry, the lockdown or the session loop, which
/// handle the parent's frames before and after any guest code runs;
/// `serve.rs` is in for its host-call path).
const WORKER_FILES: &[&str] = &[
    "budget/meter.rs",
    "budget/mod.rs",
    "budget/stop.rs",
    "budget/window.rs",
    "config.rs",
    "convert.rs",
    "diag.rs",
    "error.rs",
    "events.rs",
    "records_from_lua.rs",
    "registry.rs",
    "runner.rs",
    "sandbox/capabilities.rs",
    "sandbox/grants.rs",
    "sandbox/io.rs",
    "sandbox/mod.rs",
    "sandbox/os.rs",
    "sandbox/process_view.rs",
    "sandbox/sdk.rs",
    "serve.rs",
    "vm/callbacks.rs",
    "vm/eval.rs",
    "vm/event.rs",
    "vm/load_config.rs",
    "vm/mod.rs",
    "vm/plugin.rs",
    "vm/run.rs",
];

/// The worker's other modules, which no guest code reaches, and why. Every
/// `.rs` file of `reference-worker/src` is in exactly one of the two lists
/// (`every_worker_module_is_listed`), so a new module cannot go unread.
const WORKER_FILES_NOT_REACHED: &[(&str, &str)] = &[
    (
        "lib.rs",
        "the crate's exports and the allocator declaration",
    ),
    ("main.rs", "the process entry, before any guest code"),
    (
        "lockdown.rs",
        "the process's lockdown, before the first request",
    ),
    (
        "lockdown/capabilities.rs",
        "the capability drop, before initialize is answered",
    ),
    (
        "lockdown/filter.rs",
        "the seccomp filter, built before the first request",
    ),
    (
        "lockdown/filter/allowlist.rs",
        "the seccomp filter's system calls, a table",
    ),
    (
        "lockdown/landlock.rs",
        "the Landlock ruleset, before the first request",
    ),
    (
        "lockdown/probe.rs",
        "the lockdown's probe of the kernel, at start",
    ),
    (
        "stdio.rs",
        "the session loop over the parent's frames, between requests",
    ),
    ("lint/annotations.rs", LINT),
    ("lint/depth.rs", LINT),
    ("lint/environment.rs", LINT),
    ("lint/mod.rs", LINT),
    ("lint/report.rs", LINT),
    ("lint/rules.rs", LINT),
    ("lint/sdk_calls.rs", LINT),
    ("lint/suggest.rs", LINT),
    ("lint/walk.rs", LINT),
    ("vm/check.rs", LINT),
];

/// Why the lint's modules are not read for loops.
const LINT: &str = "the `check` operation's lint (DESIGN §15.10): it runs no guest code; it reads the request's source (not linted past 512 KiB, `LINT_SOURCE_BYTES_MAX`) and the VM's live globals (at most 4,096, `LIVE_ENTRIES_MAX`), bounded by those, not by the budget";

/// The modules of `mlua` the worker calls into while guest code runs or
/// on its results: a callback's entry, error wrapping and tracebacks,
/// conversions between Lua and Rust values, tables, strings, functions,
/// registry references, the allocator and userdata finalizers.
const MLUA_FILES: &[&str] = &[
    "conversion.rs",
    "error.rs",
    "function.rs",
    "memory.rs",
    "multi.rs",
    "state/extra.rs",
    "state/raw.rs",
    "state/util.rs",
    "string.rs",
    "table.rs",
    "traits.rs",
    "types/registry_key.rs",
    "types/value_ref.rs",
    "userdata/util.rs",
    "util/error.rs",
    "util/mod.rs",
    "util/short_names.rs",
    "util/userdata.rs",
    "value.rs",
];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder of a registry package the workspace uses (`cargo metadata`).
fn package_dir(name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(manifest().join("../Cargo.toml"))
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let package = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("cargo metadata does not list {name}"));
    PathBuf::from(package["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every item of the sources.
fn extract() -> Vec<Item> {
    let patched = PathBuf::from(env!("QUIRL_METERED_LUA_PATCHED"));
    let mut c_files: Vec<PathBuf> = std::fs::read_dir(&patched)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    c_files.sort();
    let keep = |origin: &str| -> Option<String> {
        let path = Path::new(origin);
        if path.parent() != Some(patched.as_path()) {
            return None;
        }
        path.file_name().map(|n| n.to_string_lossy().into_owned())
    };
    let mut items = BTreeSet::new();
    let mut calls: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut defined: BTreeSet<(String, String)> = BTreeSet::new();
    for file in &c_files {
        let unit = c::unit(file, &patched, &keep);
        items.extend(unit.items);
        for (k, v) in unit.calls {
            calls.entry(k).or_default().extend(v);
        }
        defined.extend(unit.defined);
    }
    items.extend(recursions(&calls, &defined));
    let worker = manifest().join("../src");
    for name in WORKER_FILES {
        let text = std::fs::read_to_string(worker.join(name))
            .unwrap_or_else(|e| panic!("reference-worker/src/{name}: {e}"));
        items.extend(rust::items(&format!("worker/{name}"), &text));
    }
    let mlua = package_dir("mlua").join("src");
    for name in MLUA_FILES {
        let text = std::fs::read_to_string(mlua.join(name))
            .unwrap_or_else(|e| panic!("mlua/src/{name}: {e}"));
        items.extend(rust::items(&format!("mlua/{name}"), &text));
    }
    items.into_iter().collect()
}

/// The functions of the C sources that are in a cycle of the direct call
/// graph (Tarjan's strongly connected components).
fn recursions(
    calls: &BTreeMap<(String, String), BTreeSet<String>>,
    defined: &BTreeSet<(String, String)>,
) -> Vec<Item> {
    // resolve a callee: the same file's function first, else any
    let mut by_name: BTreeMap<&str, Vec<&(String, String)>> = BTreeMap::new();
    for d in defined {
        by_name.entry(d.1.as_str()).or_default().push(d);
    }
    let nodes: Vec<&(String, String)> = defined.iter().collect();
    let index: BTreeMap<&(String, String), usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut edges = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for callee in calls.get(*node).into_iter().flatten() {
            let Some(candidates) = by_name.get(callee.as_str()) else {
                continue;
            };
            let target = candidates
                .iter()
                .find(|d| d.0 == node.0)
                .or_else(|| candidates.first());
            if let Some(target) = target {
                edges[i].push(index[*target]);
            }
        }
    }
    // Tarjan, iteratively
    let n = nodes.len();
    let mut idx = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on = vec![false; n];
    let mut stack = Vec::new();
    let mut counter = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if idx[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut next)) = work.last_mut() {
            if *next == 0 && idx[v] == usize::MAX {
                idx[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on[v] = true;
            }
            if *next < edges[v].len() {
                let w = edges[v][*next];
                *next += 1;
                if idx[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(idx[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == idx[v] {
                    let mut component = Vec::new();
                    loop {
                        let w = stack.pop().unwrap();
                        on[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let cyclic = component.len() > 1 || edges[v].contains(&v);
                    if cyclic {
                        // one item per cycle, named by its first member
                        let mut members: Vec<&(String, String)> =
                            component.iter().map(|&w| nodes[w]).collect();
                        members.sort();
                        let first = members[0];
                        if std::env::var_os("LOOPS_PRINT").is_some() {
                            let names: Vec<String> =
                                members.iter().map(|(f, n)| format!("{f}:{n}")).collect();
                            println!("cycle of {}: {}", members.len(), names.join(" "));
                        }
                        out.push(Item {
                            file: first.0.clone(),
                            function: first.1.clone(),
                            kind: Kind::Recursion,
                            what: format!("recursion {}", members.len()),
                        });
                    }
                }
            }
        }
    }
    out
}

/// One row of `LOOPS.md`: `| file | function | what | class | why |`.
struct Entry {
    line: usize,
    class: String,
    why: String,
}

fn inventory() -> (String, BTreeMap<(String, String, String), Entry>) {
    let path = manifest().join("LOOPS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut entries = BTreeMap::new();
    let mut errors = String::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        if cells.len() != 5 {
            errors.push_str(&format!("LOOPS.md:{line_no}: expected 5 cells: {line}\n"));
            continue;
        }
        let unquote = |s: &str| s.trim_matches('`').to_owned();
        let key = (unquote(cells[0]), unquote(cells[1]), unquote(cells[2]));
        let class = cells[3].to_owned();
        let why = cells[4].to_owned();
        if !CLASSES.contains(&class.as_str()) {
            errors.push_str(&format!(
                "LOOPS.md:{line_no}: class `{class}` is none of {CLASSES:?}\n"
            ));
        }
        if why.len() < 8 {
            errors.push_str(&format!(
                "LOOPS.md:{line_no}: say why the loop is bounded\n"
            ));
        }
        if class == "constant" && !why.chars().any(|c| c.is_ascii_digit()) {
            errors.push_str(&format!(
                "LOOPS.md:{line_no}: a constant bound names its constant (a number)\n"
            ));
        }
        if entries
            .insert(
                key.clone(),
                Entry {
                    line: line_no,
                    class,
                    why,
                },
            )
            .is_some()
        {
            errors.push_str(&format!("LOOPS.md:{line_no}: {key:?} listed twice\n"));
        }
    }
    (errors, entries)
}

#[test]
fn every_loop_of_the_linked_sources_has_an_entry_and_every_entry_a_loop() {
    let items = extract();
    let (mut errors, entries) = inventory();
    let found: BTreeSet<_> = items.iter().map(Item::key).collect();
    let mut missing = Vec::new();
    for item in &items {
        if !entries.contains_key(&item.key()) {
            missing.push(item);
        }
    }
    for (key, entry) in &entries {
        if !found.contains(key) {
            errors.push_str(&format!(
                "LOOPS.md:{}: {key:?} names no loop of the sources (it moved or went away)\n",
                entry.line
            ));
        }
    }
    if std::env::var_os("LOOPS_PRINT").is_some() {
        for item in &missing {
            println!(
                "| `{}` | `{}` | `{}` | ? | ? |",
                item.file, item.function, item.what
            );
        }
    }
    for item in &missing {
        errors.push_str(&format!(
            "no entry in LOOPS.md for {} {} {} ({:?})\n",
            item.file, item.function, item.what, item.kind
        ));
    }
    assert!(
        errors.is_empty(),
        "{} items, {} entries; {} missing:\n{errors}",
        items.len(),
        entries.len(),
        missing.len()
    );
    // The classes were used on purpose: a charged loop names its charge.
    for entry in entries.values() {
        if entry.class == "charged" {
            assert!(
                entry.why.contains("quirl")
                    || entry.why.contains(".patch")
                    || entry.why.contains("lmeter")
                    || entry.why.contains("charge"),
                "LOOPS.md:{}: a charged loop names its charge",
                entry.line
            );
        }
    }
}

#[test]
fn every_worker_module_is_listed() {
    // A module added to the worker is read for loops, or said not to be
    // reachable by guest code, never silently left out.
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path.strip_prefix(base).unwrap().to_string_lossy();
                out.insert(name.replace('\\', "/"));
            }
        }
    }
    let src = manifest().join("../src");
    let mut modules = BTreeSet::new();
    walk(&src, &src, &mut modules);
    let mut listed = BTreeSet::new();
    for name in WORKER_FILES
        .iter()
        .copied()
        .chain(WORKER_FILES_NOT_REACHED.iter().map(|(name, _)| *name))
    {
        assert!(listed.insert(name.to_owned()), "{name} is listed twice");
    }
    let unlisted: Vec<_> = modules.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&modules).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "reference-worker/src modules in neither list of tests/loop_inventory/main.rs: {unlisted:?}; listed but absent: {gone:?}"
    );
}

#[test]
fn the_extraction_finds_every_kind_of_loop() {
    // The tokenizers on known text: each kind of loop once, and none of
    // the look-alikes.
    let rust = rust::items(
        "t.rs",
        r#"
        impl Display for X { fn f(&self) { for x in y {} } }
        fn g<F>(f: F) where for<'a> F: Fn(&'a str) { while a {} loop { break } let c = 'x'; let s = "for while"; }
        fn h(n: u32) -> u32 { if n == 0 { 0 } else { h(n - 1) } }
        fn k(v: &[u8]) -> usize { v.iter().filter(|b| **b == b'\'').count() }
        fn m(v: &[u8]) -> bool { std::str::from_utf8(v).is_ok() && v.split(|b| *b == 0).next().is_some() }
        "#,
    );
    let whats: Vec<String> = rust
        .iter()
        .map(|i| format!("{} {}", i.function, i.what))
        .collect();
    assert_eq!(
        whats,
        [
            "f for 1",
            "g while 1",
            "g loop 1",
            "h recursion 1",
            "k filter 1",
            "k count 1",
            "m from_utf8 1",
            "m split 1"
        ]
    );
}

#[test]
fn the_c_extraction_finds_loops_in_macros_and_backward_gotos_only() {
    let dir = std::env::temp_dir().join(format!("loop-inventory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("t.h"),
        "#define CLEAR(a, n) { int i_; for (i_ = 0; i_ < (n); i_++) (a)[i_] = 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("t.c"),
        r#"#include <string.h>
#include "t.h"
static int f (int *a, int n) {
  CLEAR(a, n);
  do { n--; } while (n > 0);
 again:
  if (n < 3) { n++; goto again; }
  goto done;
 done:
  while (n) n--;
  return (int)strlen("for while do");
}
static int g (int n) { return n ? g(n - 1) : 0; }
"#,
    )
    .unwrap();
    let keep = |origin: &str| -> Option<String> {
        let path = Path::new(origin);
        (path.parent() == Some(dir.as_path()))
            .then(|| path.file_name().unwrap().to_string_lossy().into_owned())
    };
    let unit = c::unit(&dir.join("t.c"), &dir, &keep);
    let mut found: Vec<String> = unit
        .items
        .iter()
        .map(|i| format!("{} {}", i.function, i.what))
        .collect();
    found.sort();
    // The macro's `for` is f's; the `while` that ends the `do` is not a
    // loop; `goto again` goes back, `goto done` forward; `strlen` is a scan;
    // nothing of <string.h> is kept.
    assert_eq!(
        found,
        ["f do 1", "f for 1", "f goto 1", "f strlen 1", "f while 1"]
    );
    let cycles = recursions(&unit.calls, &unit.defined);
    assert_eq!(cycles.len(), 1);
    assert_eq!(
        (cycles[0].function.as_str(), cycles[0].what.as_str()),
        ("g", "recursion 1")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
