#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §7.1, §7.2: the `check` report, negotiated by the worker capability
//! `check.diagnostics` — its record, its bounds, and the session rule that a
//! report without the grant is `wrong_type`.

use quirl_lua_protocol::limits::DIAGNOSTICS_MAX;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

fn diagnostic(rule: &str, severity: &str) -> Value {
    json!({
        "record": {
            "code": "validation",
            "command": null,
            "context": [],
            "exit_status": null,
            "help": ["did you mean `print`?"],
            "labels": [{"end": 4, "message": "called here", "source": null, "start": 0}],
            "message": "undefined global `prnt`",
        },
        "rule": rule,
        "severity": severity,
    })
}

fn report(diagnostics: Vec<Value>) -> Value {
    json!({ "diagnostics": diagnostics })
}

fn initialize(grants: Option<Vec<String>>) -> Operation {
    Operation::initialize(Policy::quirl_config_profile(), grants, false)
}

fn check_request() -> Operation {
    Operation::Check {
        source: "prnt(1)".into(),
        source_name: "a.lua".into(),
    }
}

/// A parent session past `initialize` with `grants`, with a `check` in flight.
fn parent_checking(grants: Option<Vec<String>>) -> (ParentSession, u64) {
    let mut parent = ParentSession::new();
    parent.request(initialize(grants)).unwrap();
    parent
        .receive(WorkerFrame::Response {
            response: Response::success(1, Value::Null),
        })
        .unwrap();
    let (id, _) = parent.request(check_request()).unwrap();
    (parent, id)
}

/// A worker session past `initialize` with `grants`, with a `check` in flight.
fn worker_checking(grants: Option<Vec<String>>) -> WorkerSession {
    let mut worker = WorkerSession::new();
    worker
        .receive(&ParentFrame::Request {
            request: Request {
                id: 1,
                operation: initialize(grants),
            },
        })
        .unwrap();
    worker.respond(Ok(Value::Null)).unwrap();
    worker
        .receive(&ParentFrame::Request {
            request: Request {
                id: 2,
                operation: check_request(),
            },
        })
        .unwrap();
    worker
}

fn granted() -> Option<Vec<String>> {
    Some(vec![
        "prompt.register".to_owned(),
        CHECK_DIAGNOSTICS_GRANT.to_owned(),
    ])
}

#[test]
fn a_report_decodes_and_reencodes_sorted() {
    let value = report(vec![
        diagnostic("undefined_global", "error"),
        diagnostic("unused_local", "warning"),
    ]);
    let OperationResult::CheckReport(decoded) =
        OperationResult::decode(OperationKind::Check, &value).unwrap()
    else {
        panic!("not a report");
    };
    assert_eq!(decoded.diagnostics.len(), 2);
    assert_eq!(decoded.diagnostics[0].severity, Severity::Error);
    assert_eq!(decoded.diagnostics[1].rule, "unused_local");
    assert!(decoded.has_errors());
    let again = OperationResult::CheckReport(decoded).to_value().unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&value).unwrap()
    );
    // `null` stays a valid `check` result.
    assert_eq!(
        OperationResult::decode(OperationKind::Check, &Value::Null).unwrap(),
        OperationResult::Null
    );
}

#[test]
fn a_report_is_bounded_and_closed() {
    let kind = |value: Value| {
        OperationResult::decode(OperationKind::Check, &value)
            .unwrap_err()
            .kind()
    };
    let too_many = vec![diagnostic("unused_local", "warning"); DIAGNOSTICS_MAX + 1];
    assert_eq!(kind(report(too_many)), ErrorKind::DomainBounds);
    let most = vec![diagnostic("unused_local", "warning"); DIAGNOSTICS_MAX];
    assert!(OperationResult::decode(OperationKind::Check, &report(most)).is_ok());
    for rule in ["", "Undefined", "undefined-global", "_x", &"x".repeat(65)] {
        assert_eq!(
            kind(report(vec![diagnostic(rule, "error")])),
            ErrorKind::DomainBounds,
            "{rule}"
        );
    }
    assert!(
        OperationResult::decode(
            OperationKind::Check,
            &report(vec![diagnostic(&"x".repeat(64), "error")])
        )
        .is_ok()
    );
    assert_eq!(
        kind(report(vec![diagnostic("a", "fatal")])),
        ErrorKind::UnknownVariant
    );
    let mut extra = diagnostic("a", "error");
    extra["line"] = json!(3);
    assert_eq!(kind(report(vec![extra])), ErrorKind::UnknownField);
    assert_eq!(
        kind(json!({"diagnostics": [], "ok": true})),
        ErrorKind::UnknownField
    );
    assert_eq!(kind(json!({})), ErrorKind::MissingField);
    let mut reversed = diagnostic("a", "error");
    reversed["record"]["labels"][0]["start"] = json!(5);
    assert_eq!(kind(report(vec![reversed])), ErrorKind::ErrorRecordBounds);
    // Not an object, not null: `wrong_type`, as before reports existed.
    assert_eq!(kind(json!(0)), ErrorKind::WrongType);
    assert_eq!(kind(json!([])), ErrorKind::WrongType);
}

// SPEC §7.2-c: a report without the grant is `wrong_type`: the parent's
// session is poisoned by it.
#[test]
fn a_parent_refuses_a_report_it_did_not_negotiate() {
    for grants in [
        None,
        Some(vec![]),
        Some(vec!["check.diagnostic".to_owned()]),
    ] {
        let (mut parent, id) = parent_checking(grants);
        let error = parent
            .receive(WorkerFrame::Response {
                response: Response::success(id, report(vec![])),
            })
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WrongType);
        assert_eq!(parent.state(), SessionState::Poisoned);
    }
}

// SPEC §7.2-c: with the grant, a report and `null` are both accepted.
#[test]
fn a_parent_accepts_a_negotiated_report_or_null() {
    let (mut parent, id) = parent_checking(granted());
    let event = parent
        .receive(WorkerFrame::Response {
            response: Response::success(id, report(vec![diagnostic("a", "warning")])),
        })
        .unwrap();
    let ParentEvent::Response {
        result: Ok(OperationResult::CheckReport(decoded)),
        ..
    } = event
    else {
        panic!("not a report: {event:?}");
    };
    assert!(!decoded.has_errors());
    let (id, _) = parent.request(check_request()).unwrap();
    let event = parent
        .receive(WorkerFrame::Response {
            response: Response::success(id, Value::Null),
        })
        .unwrap();
    assert!(matches!(
        event,
        ParentEvent::Response {
            result: Ok(OperationResult::Null),
            ..
        }
    ));
    assert_eq!(parent.state(), SessionState::Ready);
}

// SPEC §7.2-d: a worker MUST NOT send a report it was not granted; its
// session refuses to send one (without poisoning: an error answer may follow).
#[test]
fn a_worker_session_refuses_to_send_an_unnegotiated_report() {
    let mut worker = worker_checking(None);
    let error = worker.respond(Ok(report(vec![]))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WrongType);
    assert_eq!(worker.state(), SessionState::Busy);
    worker.respond(Ok(Value::Null)).unwrap();
    assert_eq!(worker.state(), SessionState::Ready);

    let mut worker = worker_checking(granted());
    let bytes = worker
        .respond(Ok(report(vec![diagnostic("undefined_global", "error")])))
        .unwrap();
    let WorkerFrame::Response { response } = decode_worker_frame(&bytes[4..]).unwrap() else {
        panic!("not a response");
    };
    assert!(response.result.unwrap().is_object());
}

#[test]
fn only_check_carries_a_report() {
    let (mut parent, _) = parent_checking(granted());
    // The report is `check`'s: `initialize` or `test` answering with one is refused.
    let (id, _) = {
        parent
            .receive(WorkerFrame::Response {
                response: Response::success(2, Value::Null),
            })
            .unwrap();
        parent
            .request(Operation::Test {
                source: "x".into(),
                source_name: "t".into(),
            })
            .unwrap()
    };
    let error = parent
        .receive(WorkerFrame::Response {
            response: Response::success(id, report(vec![])),
        })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WrongType);
    assert!(!OperationResult::CheckReport(CheckReport::default()).fits(OperationKind::Initialize));
    assert!(OperationResult::CheckReport(CheckReport::default()).fits(OperationKind::Check));
}
