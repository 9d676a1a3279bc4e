//! `check` through the VM (SPEC §7.1, §7.2, DESIGN §15.10): the report a
//! parent negotiated with `check.diagnostics`, Quirl 0.1's wire without
//! it, and the VM's own globals as part of the lint's environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{
    CHECK_DIAGNOSTICS_GRANT, CheckReport, ErrorCode, Operation, OperationKind, OperationResult,
    Policy, PolicySettings, Severity,
};
use quirl_lua_reference_worker::{OpError, Verdict, Vm, VmConfig};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

const ISSUE_FILE: &str = "---@parm x number\nlocal function f(x)\n  return quirl.proces.run(\"echo \" .. x)\nend\nprnt(f(1))\nreturn io.open(\"x\")\n";

fn vm(grants: Option<&[&str]>) -> Vm {
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
            grants: grants.map(|list| list.iter().map(|g| (*g).to_owned()).collect()),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

fn negotiated() -> Vm {
    vm(Some(&["prompt.register", CHECK_DIAGNOSTICS_GRANT]))
}

fn check(vm: &mut Vm, source: &str) -> Verdict {
    vm.handle(Operation::Check {
        source: source.to_owned(),
        source_name: "issue.lua".to_owned(),
    })
}

fn report(verdict: Verdict) -> CheckReport {
    report_and_wire(verdict).0
}

/// The report, and the result as it travels (keys sorted, SPEC §6.2).
fn report_and_wire(verdict: Verdict) -> (CheckReport, Value) {
    let Verdict::Success(value) = verdict else {
        panic!("check failed: {verdict:?}");
    };
    match OperationResult::decode(OperationKind::Check, &value).unwrap() {
        OperationResult::CheckReport(report) => (report, value),
        other => panic!("not a report: {other:?}"),
    }
}

fn failure(verdict: Verdict) -> OpError {
    match verdict {
        Verdict::Failure(error) => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

// SPEC §7.2-c: with the grant, `check` answers with the report.
#[test]
fn a_negotiated_check_reports_every_finding_with_its_span() {
    let (report, wire) = report_and_wire(check(&mut negotiated(), ISSUE_FILE));
    insta::assert_json_snapshot!("issue_file_report", wire);
    let spans: Vec<(&str, Severity, &str)> = report
        .diagnostics
        .iter()
        .map(|d| {
            let label = &d.record.labels[0];
            assert_eq!(label.source, None);
            assert_eq!(d.record.code, ErrorCode::Validation);
            assert!(!d.record.help.is_empty());
            (
                d.rule.as_str(),
                d.severity,
                &ISSUE_FILE[label.start as usize..label.end as usize],
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("annotation_tag", Severity::Error, "@parm"),
            ("unknown_member", Severity::Error, "proces"),
            ("undefined_global", Severity::Error, "prnt"),
            ("absent_facility", Severity::Error, "io"),
        ]
    );
}

// SPEC §7.2-d: without the grant the worker never sends a report: the
// errors as one `validation` error (Quirl 0.1's wire), warnings not at all.
#[test]
fn without_the_grant_errors_are_one_validation_error_and_warnings_are_not_sent() {
    for grants in [None, Some(&["prompt.register"][..])] {
        let error = failure(check(&mut vm(grants), ISSUE_FILE));
        assert_eq!(error.code, ErrorCode::Validation);
        assert!(
            error
                .message
                .starts_with("`---@parm` is not an annotation tag (and 3 more errors)"),
            "{}",
            error.message
        );
        assert_eq!(error.labels.len(), 4);
        assert_eq!(error.labels[0].source.as_deref(), Some(ISSUE_FILE));
        assert_eq!(
            &ISSUE_FILE[error.labels[1].start as usize..error.labels[1].end as usize],
            "proces"
        );
        assert_eq!(error.context[2], "check: undefined_global at issue.lua:5:1");
        assert!(error.help.iter().any(|h| h == "did you mean `---@param`?"));
        // Warnings only: `null`, as before.
        let verdict = check(&mut vm(grants), "local unused = 1\nx = 2\n");
        assert!(
            matches!(verdict, Verdict::Success(Value::Null)),
            "{verdict:?}"
        );
    }
    let warnings = report(check(&mut negotiated(), "local unused = 1\nx = 2\n"));
    assert!(!warnings.has_errors());
    assert_eq!(warnings.diagnostics.len(), 2);
}

#[test]
fn globals_earlier_requests_defined_are_defined() {
    let mut vm = negotiated();
    let source = "return helper() + shared.count";
    assert!(report(check(&mut vm, source)).has_errors());
    let verdict = vm.handle(Operation::Eval {
        source: "helper = function() return 1 end shared = {count = 2}".to_owned(),
    });
    assert!(matches!(verdict, Verdict::Success(_)), "{verdict:?}");
    assert_eq!(report(check(&mut vm, source)).diagnostics, []);
    // A globals table with a metatable resolves any name: nothing is certain.
    let verdict = vm.handle(Operation::Eval {
        source: "setmetatable(_G, {__index = function(_, k) return k end}) return true".to_owned(),
    });
    assert!(matches!(verdict, Verdict::Success(_)), "{verdict:?}");
    assert!(!report(check(&mut vm, "return anything()")).has_errors());
}

#[test]
fn the_grants_of_the_vm_decide_what_is_absent() {
    let mut plain = negotiated();
    assert!(report(check(&mut plain, "return load('return 1')()")).has_errors());
    let mut loading = vm(Some(&["lua.load", CHECK_DIAGNOSTICS_GRANT]));
    assert_eq!(
        report(check(&mut loading, "return load('return 1')()")).diagnostics,
        []
    );
}

#[test]
fn a_source_lua_does_not_compile_is_still_a_lua_error() {
    let error = failure(check(&mut negotiated(), "local = 1"));
    assert_eq!(error.code, ErrorCode::Lua);
}

#[test]
fn a_long_report_keeps_the_errors_and_says_how_many_more() {
    let source: String = (0..100).map(|i| format!("undefined_{i}()\n")).collect();
    let report = report(check(&mut negotiated(), &source));
    assert_eq!(report.diagnostics.len(), 64);
    assert!(
        report.diagnostics[..63]
            .iter()
            .all(|d| d.severity == Severity::Error)
    );
    let last = &report.diagnostics[63];
    assert_eq!(last.rule, "more_findings");
    assert!(
        last.record
            .message
            .starts_with("37 more findings (37 errors")
    );
}

/// The deepest nesting and the longest operator chains Lua's compiler
/// accepts never exhaust the worker's stack (its main thread has 8 MiB;
/// this test gives the VM's thread the same): the lint reads what it can
/// walk and free, and names the rest `lint_incomplete`.
#[test]
fn the_deepest_sources_lua_compiles_do_not_exhaust_the_stack() {
    let worker_stack = 8 << 20;
    let run = std::thread::Builder::new()
        .stack_size(worker_stack)
        .spawn(|| {
            let mut vm = negotiated();
            let shapes: [(&str, &str, &str); 4] = [
                ("(", "x", ")"),
                ("{", "x", "}"),
                ("function() return ", "x", " end"),
                ("(function() if x then ", "x()", " end end)()"),
            ];
            let mut linted = 0;
            let mut cut = 0;
            for (open, inner, close) in shapes {
                for depth in (10..=400).step_by(10) {
                    let source = format!(
                        "return {}{inner}{}",
                        open.repeat(depth),
                        close.repeat(depth)
                    );
                    match vm.handle(Operation::Check {
                        source,
                        source_name: "deep.lua".to_owned(),
                    }) {
                        Verdict::Success(value) => {
                            let report: CheckReport =
                                match OperationResult::decode(OperationKind::Check, &value) {
                                    Ok(OperationResult::CheckReport(report)) => report,
                                    other => panic!("{other:?}"),
                                };
                            if report
                                .diagnostics
                                .iter()
                                .any(|d| d.rule == "lint_incomplete")
                            {
                                cut += 1;
                            } else {
                                linted += 1;
                            }
                        }
                        // Lua's own limit.
                        Verdict::Failure(error) => {
                            assert_eq!(error.code, ErrorCode::Lua, "{error:?}");
                            break;
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            // Chains of any length compile: 262,144 operators in 512 KiB.
            for (terms, lints) in [(1_000, true), (262_000, false)] {
                let source = format!("return {}1", "1+".repeat(terms));
                let report = report(check(&mut vm, &source));
                let incomplete = report
                    .diagnostics
                    .iter()
                    .any(|d| d.rule == "lint_incomplete");
                assert_eq!(!incomplete, lints, "{terms} terms");
            }
            (linted, cut)
        })
        .unwrap();
    let (linted, cut) = run.join().expect("the lint exhausted the stack");
    assert!(linted >= 10 && cut >= 1, "linted {linted}, cut {cut}");
}
