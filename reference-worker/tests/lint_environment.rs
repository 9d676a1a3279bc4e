//! The lint's standard library is the sandbox's own (DESIGN §15.10, SPEC
//! §7.2): the committed readings (`snapshots/lint_environment.snap.json`)
//! are made again from live states and must not differ, and the
//! environment the lint derives for a grant set must be exactly what a
//! worker initialized with those grants shows its guest — for no grants,
//! `lua.load`, every other capability, and all of them together.
//!
//! After a change to the sandbox: `INSTA_UPDATE=always cargo test -p
//! quirl-lua-reference-worker --test lint_environment` (or `cargo insta
//! review`), review the diff, and run the tests once more: the lint embeds
//! the committed reading when it is built, so the comparisons of the
//! accepting run still saw the old one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{Operation, Policy, PolicySettings};
use quirl_lua_reference_worker::lint::environment::{
    Entry, Reference, Tree, known_capabilities, read_fresh_sandbox,
};
use quirl_lua_reference_worker::lint::{Environment, SDK_SIGNATURES};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn grants(list: &[&str]) -> HashSet<String> {
    list.iter().map(|grant| (*grant).to_owned()).collect()
}

#[test]
fn the_committed_readings_are_the_live_environments() {
    let generated = Reference::generate(&known_capabilities()).unwrap();
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::assert_binary_snapshot!(
            "lint_environment.json",
            generated.to_json_text().into_bytes()
        );
    });
}

/// Every grant set the test compares: none, each capability alone, all.
fn grant_sets() -> Vec<HashSet<String>> {
    let known = known_capabilities();
    assert!(known.iter().any(|grant| grant == "lua.load"), "{known:?}");
    let mut sets = vec![HashSet::new()];
    sets.extend(known.iter().map(|grant| grants(&[grant])));
    sets.push(known.iter().cloned().collect());
    sets
}

#[test]
fn the_lint_sees_what_a_fresh_sandbox_holds_for_every_grant_set() {
    for set in grant_sets() {
        let lint = Environment::for_grants(&set).unwrap();
        let live = read_fresh_sandbox(&set).unwrap();
        assert!(live.complete && !live.dynamic);
        assert_eq!(
            *lint.standard, live.tree,
            "the lint's environment for grants {set:?} differs from the live sandbox"
        );
    }
}

/// A guest's own listing of its globals: every global, and the members of
/// every table that holds a function, two levels deep (each table listed
/// once, at its shortest path, as the lint's reader lists them),
/// `name:type` per line.
const LIST_GLOBALS: &str = r#"
local seen, out = {[_G] = true}, {}
local function has_function(t)
  for k, v in pairs(t) do
    if type(k) == "string" and type(v) == "function" then return true end
  end
  return false
end
local function list(t, prefix, depth)
  local names = {}
  for k in pairs(t) do if type(k) == "string" then names[#names + 1] = k end end
  table.sort(names)
  local tables = {}
  for _, k in ipairs(names) do
    local v = rawget(t, k)
    local fresh = type(v) == "table" and not seen[v]
    if fresh then seen[v] = true end
    if fresh and depth <= 2 and has_function(v) then
      tables[#tables + 1] = k
    else
      out[#out + 1] = prefix .. k .. ":" .. type(v)
    end
  end
  for _, k in ipairs(tables) do
    out[#out + 1] = prefix .. k .. ":{}"
    list(rawget(t, k), prefix .. k .. ".", depth + 1)
  end
end
list(_G, "", 1)
table.sort(out)
return table.concat(out, "\n")
"#;

fn flatten(tree: &Tree, prefix: &str, out: &mut BTreeSet<String>) {
    for (name, entry) in &tree.entries {
        match entry {
            Entry::Table(members) => {
                out.insert(format!("{prefix}{name}:{{}}"));
                flatten(members, &format!("{prefix}{name}."), out);
            }
            Entry::OpaqueTable => {
                out.insert(format!("{prefix}{name}:table"));
            }
            Entry::Function => {
                out.insert(format!("{prefix}{name}:function"));
            }
            Entry::Value(kind) => {
                out.insert(format!("{prefix}{name}:{kind}"));
            }
        }
    }
}

fn initialized_vm(set: &HashSet<String>) -> Vm {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 16 << 20,
        instruction_limit: 10_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    Vm::new(
        &VmConfig {
            policy,
            grants: Some(set.iter().cloned().collect()),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

// The Done-when of the lint: its global list against the live sandbox
// globals for no grants, `lua.load` and every other capability, as the
// guest of a worker initialized with them lists them.
#[test]
fn the_lint_sees_what_the_guest_of_an_initialized_worker_sees() {
    for set in grant_sets() {
        let mut vm = initialized_vm(&set);
        let Verdict::Success(serde_json::Value::String(listing)) = vm.handle(Operation::Eval {
            source: LIST_GLOBALS.to_owned(),
        }) else {
            panic!("the listing did not run for grants {set:?}");
        };
        let guest: BTreeSet<String> = listing.lines().map(str::to_owned).collect();
        let mut lint = BTreeSet::new();
        flatten(
            &Environment::for_grants(&set).unwrap().standard,
            "",
            &mut lint,
        );
        let missing: Vec<&String> = guest.difference(&lint).collect();
        let extra: Vec<&String> = lint.difference(&guest).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "grants {set:?}: the guest sees {missing:?} that the lint does not; the lint knows {extra:?} that the guest does not see"
        );
        assert!(guest.contains("quirl.process.run:function"));
    }
}

#[test]
fn lua_load_adds_load_require_and_package_and_nothing_else_adds_a_global() {
    let reference = Reference::committed().unwrap();
    for (grant, added) in &reference.capabilities {
        let names: Vec<&String> = added.entries.keys().collect();
        if grant == "lua.load" {
            assert_eq!(names, ["load", "package", "require"]);
        }
    }
    assert!(reference.stock.entries.contains_key("io"));
    assert!(reference.stock.get(&["string", "dump"]).is_some());
    assert!(reference.sandbox.get(&["string", "dump"]).is_none());
}

/// Capability strings the sandbox's sources define (`pub const …_GRANT:
/// &str = "…";`): each must be one the readings cover, so that a new
/// capability cannot be added without the lint learning what it adds.
#[test]
fn every_capability_the_sandbox_defines_is_covered() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sandbox");
    let mut files = vec![root];
    let mut defined = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("pub const ")
                && line.contains("_GRANT: &str = \"")
                && let Some(value) = line.split('"').nth(1)
            {
                defined.push(value.to_owned());
            }
        }
    }
    assert!(
        defined.iter().any(|grant| grant == "lua.load"),
        "{defined:?}"
    );
    let known = known_capabilities();
    for grant in defined {
        assert!(
            known.contains(&grant),
            "the sandbox defines the capability `{grant}`, which lint::environment::known_capabilities does not cover"
        );
    }
}

#[test]
fn sdk_signatures_cover_exactly_the_sdk_functions() {
    let reference = Reference::committed().unwrap();
    let mut functions = BTreeSet::new();
    let mut stack = vec![(
        "quirl".to_owned(),
        reference.sandbox.get(&["quirl"]).unwrap(),
    )];
    while let Some((path, entry)) = stack.pop() {
        match entry {
            Entry::Function => {
                functions.insert(path);
            }
            Entry::Table(members) => {
                for (name, member) in &members.entries {
                    stack.push((format!("{path}.{name}"), member));
                }
            }
            _ => {}
        }
    }
    let signed: BTreeSet<String> = SDK_SIGNATURES
        .iter()
        .map(|signature| signature.path.to_owned())
        .collect();
    assert_eq!(functions, signed);
}

#[test]
fn sdk_calls_fail_without_their_arguments_and_ignore_extra_ones() {
    let mut vm = initialized_vm(&HashSet::new());
    for signature in SDK_SIGNATURES {
        if signature.parameters.is_empty() {
            continue;
        }
        let verdict = vm.handle(Operation::Eval {
            source: format!("return (pcall({}))", signature.path),
        });
        assert!(
            matches!(verdict, Verdict::Success(serde_json::Value::Bool(false))),
            "{} without arguments: {verdict:?}",
            signature.path
        );
    }
    for extra in [
        "return quirl.cwd(1, 2) ~= nil",
        "return quirl.config({}, 1) ~= nil",
    ] {
        let verdict = vm.handle(Operation::Eval {
            source: extra.to_owned(),
        });
        assert!(
            matches!(verdict, Verdict::Success(serde_json::Value::Bool(true))),
            "{extra}: {verdict:?}"
        );
    }
}
