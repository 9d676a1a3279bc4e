//! No false alarms on real code (DESIGN §15.10): `check`'s lint finds no
//! error in code that runs — every error it reports is a certain failure
//! where the code is reached, and this code is reached and does not fail.
//!
//! The corpus is the Lua this project runs: the README's examples, the
//! benchmark programs (`bench/lua/*.lua` in the sandbox, the idioms of
//! `bench/lua/idioms/` under stock Lua, as `units.sh` runs them), the
//! pattern harness both run, the real-program shapes of
//! `tests/real_programs.rs`, and every guest source of the conformance
//! cases that expects a successful answer, each checked through a VM
//! after the case's setup (so the globals the setup defines count), with
//! the case's grants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{
    CHECK_DIAGNOSTICS_GRANT, Operation, OperationKind, OperationResult, Policy, PolicySettings,
    Severity, StrictDecode,
};
use quirl_lua_reference_worker::lint::{self, Environment, Finding};
use quirl_lua_reference_worker::sandbox::grants::default_grants;
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lua_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no Lua files in {dir}");
    files
}

fn errors_of(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|finding| finding.severity == Severity::Error)
        .map(|finding| format!("{}: {}", finding.rule.as_str(), finding.message))
        .collect()
}

fn sandbox(grants: &[&str]) -> Environment {
    Environment::for_grants(&grants.iter().map(|g| (*g).to_owned()).collect()).unwrap()
}

/// Every `cat > NAME.lua <<'LUA' … LUA` of the README, with the grants the
/// README runs it under.
fn readme_examples() -> Vec<(String, String)> {
    let text = read(&root().join("README.md"));
    let mut examples = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("cat > ")
            .and_then(|rest| rest.strip_suffix(" <<'LUA'"))
        else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|line| *line != "LUA").collect();
        examples.push((name.to_owned(), body.join("\n")));
    }
    assert!(examples.len() >= 5, "{} README examples", examples.len());
    examples
}

/// The `--grant`s of the README's command lines that run `name`.
fn readme_grants(name: &str) -> Vec<String> {
    let text = read(&root().join("README.md"));
    let mut grants = Vec::new();
    for line in text.lines().filter(|line| line.contains(name)) {
        let mut words = line.split_whitespace();
        while let Some(word) = words.next() {
            if word == "--grant"
                && let Some(grant) = words.next()
            {
                grants.push(grant.to_owned());
            }
        }
    }
    grants
}

#[test]
fn the_readme_examples_have_no_errors() {
    for (name, source) in readme_examples() {
        // The plugin examples run with `$GRANTS`; the others with the
        // `--grant`s of the lines that run them.
        let mut grants = readme_grants(&name);
        grants.extend(
            [
                "extension.contribute",
                "catalog.register",
                "commands.register",
                "prompt.register",
            ]
            .map(str::to_owned),
        );
        let env = Environment::for_grants(&grants.into_iter().collect()).unwrap();
        let errors = errors_of(&lint::lint(&source, &env));
        if name == "issue.lua" {
            // The README shows what `check` finds in it: four errors.
            assert_eq!(errors.len(), 4, "README {name}: {errors:#?}");
            continue;
        }
        assert!(errors.is_empty(), "README {name}: {errors:#?}");
    }
}

#[test]
fn the_benchmark_programs_have_no_errors() {
    let env = sandbox(&[]);
    for path in lua_files("bench/lua")
        .into_iter()
        .chain([root().join("fixtures/lua/pattern_differential_harness.lua")])
    {
        let errors = errors_of(&lint::lint(&read(&path), &env));
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    }
    // The idioms run under stock Lua (`bench/lua/idioms/units.sh`): they
    // use `os.clock` and `io.stderr`, which the sandbox has not.
    let stock = Environment::stock().unwrap();
    let mut sandboxed_errors = 0;
    for path in lua_files("bench/lua/idioms") {
        let source = read(&path);
        let errors = errors_of(&lint::lint(&source, &stock));
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        sandboxed_errors += errors_of(&lint::lint(&source, &env)).len();
    }
    assert!(
        sandboxed_errors > 0,
        "in the sandbox, the idioms' os.clock and io.stderr are errors"
    );
}

/// The raw string constants of `tests/real_programs.rs`: its prelude and
/// its programs.
fn real_programs() -> Vec<String> {
    let text = read(&root().join("reference-worker/tests/real_programs.rs"));
    let mut programs = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("r##\"") {
        let body = &rest[start + 4..];
        let Some(end) = body.find("\"##") else {
            break;
        };
        programs.push(body[..end].to_owned());
        rest = &body[end + 3..];
    }
    programs
}

/// The real-program shapes run to their end; an error the lint finds in
/// one must be a failure the program meets when it runs (the error
/// handling program calls an undefined function on purpose, under
/// `pcall`, and prints Lua's message): each error's span names a global
/// that Lua's own message names too.
#[test]
fn the_real_program_shapes_have_no_errors_but_real_failures() {
    let programs = real_programs();
    assert!(programs.len() >= 6, "{} programs", programs.len());
    let prelude = &programs[0];
    assert!(prelude.contains("local function print"));
    let env = sandbox(&[]);
    let mut real_failures = 0;
    for program in &programs[1..] {
        let source = format!("{prelude}{program}");
        let findings = lint::lint(&source, &env);
        let errors: Vec<&Finding> = findings
            .iter()
            .filter(|finding| finding.severity == Severity::Error)
            .collect();
        if errors.is_empty() {
            continue;
        }
        let mut vm = case_vm(&Value::Null);
        let Verdict::Success(Value::String(output)) = vm.handle(Operation::Eval {
            source: source.clone(),
        }) else {
            panic!("the program does not run");
        };
        for error in errors {
            let name = &source[error.span.start..error.span.end];
            assert!(
                output.contains(&format!("(global '{name}')")),
                "{}: `{name}` is no failure the program meets: {output}",
                error.message
            );
            real_failures += 1;
        }
    }
    assert_eq!(
        real_failures, 1,
        "the one undefined function of the error program"
    );
}

fn policy() -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 64 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 10_000,
    })
    .unwrap()
}

/// A VM with `grants` (`null`: the default ones) and the check report.
fn case_vm(grants: &Value) -> Vm {
    let mut list: Vec<String> = match grants {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_owned))
            .collect(),
        _ => default_grants(false).into_iter().collect(),
    };
    list.push(CHECK_DIAGNOSTICS_GRANT.to_owned());
    Vm::new(
        &VmConfig {
            policy: policy(),
            grants: Some(list),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

fn check_errors(vm: &mut Vm, source: &str) -> Vec<String> {
    let verdict = vm.handle(Operation::Check {
        source: source.to_owned(),
        source_name: "case.lua".to_owned(),
    });
    let Verdict::Success(value) = verdict else {
        return vec![format!("check failed: {verdict:?}")];
    };
    let Ok(OperationResult::CheckReport(report)) =
        OperationResult::decode(OperationKind::Check, &value)
    else {
        return vec![format!("not a report: {value}")];
    };
    report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| format!("{}: {}", d.rule, d.record.message))
        .collect()
}

#[test]
fn conformance_sources_that_run_have_no_errors() {
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("conformance/cases"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("worker-") && name.ends_with(".json"))
        })
        .collect();
    files.sort();
    for path in files {
        let file: Value = serde_json::from_str(&read(&path)).unwrap();
        let defaults = &file["defaults"];
        for case in file["cases"].as_array().unwrap() {
            let expect = &case["expect"];
            if expect.get("result").is_none() || expect.get("error_code").is_some() {
                continue;
            }
            let source = match (&case["source"], &case["operation"]) {
                (Value::String(source), _) => source.clone(),
                (_, Value::Object(operation)) => match operation.get("source") {
                    Some(Value::String(source)) if operation["operation"] != "check" => {
                        source.clone()
                    }
                    _ => continue,
                },
                _ => continue,
            };
            if source.contains("${") {
                continue;
            }
            let grants = case
                .get("grants")
                .or_else(|| defaults.get("grants"))
                .cloned()
                .unwrap_or(Value::Null);
            let mut vm = case_vm(&grants);
            for step in case["setup"].as_array().into_iter().flatten() {
                let operation = Operation::from_json_value(step).unwrap();
                let _ = vm.handle(operation);
            }
            let errors = check_errors(&mut vm, &source);
            if !errors.is_empty() {
                failures.push(format!("{} ({}): {errors:?}", case["name"], path.display()));
            }
            checked += 1;
        }
    }
    assert!(checked >= 100, "only {checked} conformance sources checked");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn corpus_grants_are_what_the_cases_say() {
    // The grant sets used above exist (a misspelt one would lint against
    // the grant-less sandbox and hide a false alarm behind a true one).
    let known: HashSet<String> = lint::environment::known_capabilities()
        .into_iter()
        .collect();
    for grant in [
        "extension.contribute",
        "catalog.register",
        "commands.register",
        "prompt.register",
    ] {
        assert!(known.contains(grant), "{grant}");
    }
}
