#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §7.2: each operation's result domain, repeated at the parent
//! boundary. A worker that passes the codec's shape checks must still not be
//! able to hand the parent a result Quirl's own runtime could never have
//! produced (SPEC.md §7.2).

mod common;

use common::*;
use quirl_lua_protocol::limits::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

fn kind_of(operation: OperationKind, value: &Value) -> Result<(), ErrorKind> {
    OperationResult::decode(operation, value)
        .map(drop)
        .map_err(|e| e.kind())
}

/// The parent session in `Busy` with `operation` in flight.
fn busy_parent(operation: Operation) -> (ParentSession, u64) {
    let mut parent = ParentSession::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_script_profile(),
            None,
            true,
        ))
        .unwrap();
    parent
        .receive(WorkerFrame::Response {
            response: Response::success(1, Value::Null),
        })
        .unwrap();
    let (id, _) = parent.request(operation).unwrap();
    (parent, id)
}

fn complete() -> Operation {
    Operation::Complete {
        command: "git".into(),
        context: Value::Null,
    }
}

fn contribution() -> Operation {
    Operation::Contribution {
        kind: ContributionKind::Catalog,
        name: "c".into(),
        context: Value::Null,
    }
}

#[test]
fn completion_items_have_quirls_shape() {
    let complete = OperationKind::Complete;
    assert_eq!(kind_of(complete, &json!([])), Ok(()));
    assert_eq!(
        kind_of(
            complete,
            &json!(["a", {"value": "b"}, {"value": "c", "detail": "d", "display": "e", "summary": "f"}])
        ),
        Ok(())
    );
    assert_eq!(kind_of(complete, &json!({})), Err(ErrorKind::WrongType));
    assert_eq!(kind_of(complete, &json!("a")), Err(ErrorKind::WrongType));
    assert_eq!(kind_of(complete, &Value::Null), Err(ErrorKind::WrongType));
    assert_eq!(kind_of(complete, &json!([1])), Err(ErrorKind::WrongType));
    assert_eq!(kind_of(complete, &json!([null])), Err(ErrorKind::WrongType));
    assert_eq!(
        kind_of(complete, &json!([{"display": "x"}])),
        Err(ErrorKind::MissingField)
    );
    assert_eq!(
        kind_of(complete, &json!([{"value": 1}])),
        Err(ErrorKind::WrongType)
    );
    assert_eq!(
        kind_of(complete, &json!([{"value": "v", "summary": null}])),
        Err(ErrorKind::WrongType)
    );
    assert_eq!(
        kind_of(complete, &json!([{"value": "v", "icon": "x"}])),
        Err(ErrorKind::UnknownField)
    );
}

#[test]
fn completion_results_are_bounded() {
    let complete = OperationKind::Complete;
    let items = |count: usize| Value::Array(vec![json!("x"); count]);
    assert_eq!(kind_of(complete, &items(COMPLETION_ITEMS_MAX)), Ok(()));
    assert_eq!(
        kind_of(complete, &items(COMPLETION_ITEMS_MAX + 1)),
        Err(ErrorKind::DomainBounds)
    );
    // One item: its strings together (keys not counted), at most 16 KiB.
    let half = COMPLETION_ITEM_BYTES_MAX / 2;
    let at = json!([{"value": "v".repeat(half), "detail": "d".repeat(half)}]);
    assert_eq!(kind_of(complete, &at), Ok(()));
    let over = json!([{"value": "v".repeat(half), "detail": "d".repeat(half + 1)}]);
    assert_eq!(kind_of(complete, &over), Err(ErrorKind::DomainBounds));
    assert_eq!(
        kind_of(
            complete,
            &json!(["x".repeat(COMPLETION_ITEM_BYTES_MAX + 1)])
        ),
        Err(ErrorKind::DomainBounds)
    );
    // All items together: at most 256 KiB.
    let full = COMPLETION_RESULT_BYTES_MAX / COMPLETION_ITEM_BYTES_MAX;
    let mut list = vec![json!("x".repeat(COMPLETION_ITEM_BYTES_MAX)); full];
    assert_eq!(kind_of(complete, &Value::Array(list.clone())), Ok(()));
    list.push(json!("x"));
    assert_eq!(
        kind_of(complete, &Value::Array(list)),
        Err(ErrorKind::DomainBounds)
    );
}

#[test]
fn the_parent_session_refuses_a_bad_completion_and_the_worker_does_not_send_it() {
    let (mut parent, id) = busy_parent(complete());
    let error = parent
        .receive(WorkerFrame::Response {
            response: Response::success(id, json!([{"value": "v", "icon": "x"}])),
        })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnknownField);
    assert_eq!(parent.state(), SessionState::Poisoned);

    let mut worker = WorkerSession::new();
    worker
        .receive(&ParentFrame::Request {
            request: Request {
                id: 1,
                operation: Operation::initialize(Policy::quirl_script_profile(), None, true),
            },
        })
        .unwrap();
    worker.respond(Ok(Value::Null)).unwrap();
    worker
        .receive(&ParentFrame::Request {
            request: Request {
                id: 2,
                operation: complete(),
            },
        })
        .unwrap();
    let refused = worker.respond(Ok(json!({"not": "a list"}))).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::WrongType);
    // A local refusal: the worker can still answer with an error.
    assert_eq!(worker.state(), SessionState::Busy);
    worker
        .respond(Err(ShellError::new(ErrorCode::Validation, "bad items")))
        .unwrap();
    assert_eq!(worker.state(), SessionState::Ready);
}

#[test]
fn contribution_results_carry_no_terminal_controls() {
    let contribution_kind = OperationKind::Contribution;
    assert_eq!(
        kind_of(contribution_kind, &json!({"rows": ["a\tb\nc", 1, null]})),
        Ok(())
    );
    for bad in [
        json!("\u{1b}[2J"),
        json!({"rows": ["ok", "bell\u{7}"]}),
        json!({"key\u{9b}": 1}),
        json!(["\r"]),
    ] {
        assert_eq!(
            kind_of(contribution_kind, &bad),
            Err(ErrorKind::DomainBounds),
            "{bad}"
        );
    }
    let mut deep = json!(1);
    for _ in 0..=ANNOTATION_DEPTH_MAX {
        deep = json!([deep]);
    }
    assert_eq!(
        kind_of(contribution_kind, &deep),
        Err(ErrorKind::DomainBounds)
    );
    let (mut parent, id) = busy_parent(contribution());
    let error = parent
        .receive(WorkerFrame::Response {
            response: Response::success(id, json!({"title": "\u{1b}]0;pwned\u{7}"})),
        })
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DomainBounds);
    assert_eq!(parent.state(), SessionState::Poisoned);
}

#[test]
fn rendered_prompts_are_bounded_and_terminal_safe() {
    let prompt = OperationKind::RenderPrompt;
    assert_eq!(kind_of(prompt, &Value::Null), Ok(()));
    assert_eq!(kind_of(prompt, &json!("main\t*\n")), Ok(()));
    assert_eq!(
        kind_of(prompt, &json!("p".repeat(PROMPT_RETURN_BYTES_MAX))),
        Ok(())
    );
    assert_eq!(
        kind_of(prompt, &json!("p".repeat(PROMPT_RETURN_BYTES_MAX + 1))),
        Err(ErrorKind::DomainBounds)
    );
    for bad in ["\u{1b}[31mred", "\r", "\u{0}", "\u{7f}", "\u{9b}31m"] {
        assert_eq!(
            kind_of(prompt, &json!(bad)),
            Err(ErrorKind::DomainBounds),
            "{bad:?}"
        );
    }
}

#[test]
fn a_test_run_counts_at_least_one_test() {
    assert_eq!(kind_of(OperationKind::Test, &json!(1)), Ok(()));
    assert_eq!(
        kind_of(OperationKind::Test, &json!(0)),
        Err(ErrorKind::DomainBounds)
    );
    let (mut parent, id) = busy_parent(Operation::Test {
        source: "return {}".into(),
        source_name: "t.lua".into(),
    });
    assert_eq!(
        parent
            .receive(WorkerFrame::Response {
                response: Response::success(id, json!(0)),
            })
            .unwrap_err()
            .kind(),
        ErrorKind::DomainBounds
    );
    assert_eq!(parent.state(), SessionState::Poisoned);
}

#[test]
fn a_loaded_plugin_registers_something() {
    let empty = json!({"commands": [], "completion_providers": [], "contributions": [],
        "events": [], "prompt_segments": []});
    assert_eq!(
        kind_of(OperationKind::LoadPlugin, &empty),
        Err(ErrorKind::DomainBounds)
    );
    // One registration of any kind is enough.
    let mut one = empty.clone();
    one["completion_providers"] = json!([{"command": "git"}]);
    assert_eq!(kind_of(OperationKind::LoadPlugin, &one), Ok(()));
}

fn reports_with(mutate: impl Fn(&mut Value)) -> Result<(), ErrorKind> {
    let mut value = reports();
    mutate(&mut value);
    kind_of(OperationKind::Event, &value)
}

#[test]
fn handler_reports_hold_only_actions_quirl_would_keep() {
    assert_eq!(reports_with(|_| {}), Ok(()));
    let action = |v: &mut Value, a: Value| v[0]["actions"] = json!([a]);
    for bad in [
        json!({"action": "diagnose", "message": "\u{1b}[2J"}),
        json!({"action": "rewrite_plan", "source": "ls\rrm -rf /"}),
        json!({"action": "block_execution", "reason": "\u{7}"}),
        json!({"action": "set_environment", "name": "BAD NAME", "value": "v"}),
        json!({"action": "set_environment", "name": "", "value": "v"}),
        json!({"action": "set_environment", "name": "A", "value": "nul\u{0}"}),
        json!({"action": "annotate_result", "key": "k k", "value": 1}),
        json!({"action": "annotate_result", "key": "k", "value": {"a": ["\u{1b}"]}}),
        json!({"action": "annotate_result", "key": "k", "value": {"\u{1b}": 1}}),
    ] {
        assert_eq!(
            reports_with(|v| action(v, bad.clone())),
            Err(ErrorKind::DomainBounds),
            "{bad}"
        );
    }
    // Newlines and tabs stay allowed; environment values may hold them too.
    assert_eq!(
        reports_with(|v| action(
            v,
            json!({"action": "set_environment", "name": "A.b-c/d_e", "value": "\u{1b}ok"})
        )),
        Ok(())
    );
    assert_eq!(
        reports_with(|v| action(v, json!({"action": "diagnose", "message": "a\tb\nc"}))),
        Ok(())
    );
}

#[test]
fn handler_reports_are_consistent_and_ordered() {
    // A failed handler keeps no actions.
    assert_eq!(
        reports_with(|v| v[0]["error"] = error_record()),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        reports_with(|v| {
            v[0]["error"] = error_record();
            v[0]["actions"] = json!([]);
        }),
        Ok(())
    );
    // Handler names are registered names: portable, at most 128 bytes.
    assert_eq!(
        reports_with(|v| v[0]["handler"] = json!("on plan")),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        reports_with(|v| v[0]["handler"] = json!("h".repeat(REGISTRATION_NAME_BYTES_MAX + 1))),
        Err(ErrorKind::DomainBounds)
    );
    // One report per handler, in handler name order, at most 64 handlers.
    let report = |name: &str| json!({"actions": [], "error": null, "handler": name});
    assert_eq!(
        kind_of(OperationKind::Event, &json!([report("a"), report("b")])),
        Ok(())
    );
    assert_eq!(
        kind_of(OperationKind::Event, &json!([report("b"), report("a")])),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        kind_of(OperationKind::Event, &json!([report("a"), report("a")])),
        Err(ErrorKind::DomainBounds)
    );
    let many: Vec<Value> = (0..=EVENT_HANDLERS_MAX)
        .map(|i| report(&format!("h{i:03}")))
        .collect();
    assert_eq!(
        kind_of(OperationKind::Event, &Value::Array(many[1..].to_vec())),
        Ok(())
    );
    assert_eq!(
        kind_of(OperationKind::Event, &Value::Array(many)),
        Err(ErrorKind::DomainBounds)
    );
}

fn event_request(protocol_version: u32) -> ParentFrame {
    ParentFrame::Request {
        request: Request {
            id: 2,
            operation: Operation::Event {
                event: ExtensionEvent {
                    protocol_version,
                    sequence: 1,
                    data: ExtensionEventData::SessionStart { restored: false },
                },
            },
        },
    }
}

#[test]
fn extension_events_carry_protocol_version_two() {
    assert_eq!(EXTENSION_PROTOCOL_VERSION, 2);
    assert!(encode_parent_frame(&event_request(2)).is_ok());
    for version in [0, 1, 3, u32::MAX] {
        // The sender refuses to encode it …
        assert_eq!(
            encode_parent_frame(&event_request(version))
                .unwrap_err()
                .kind(),
            ErrorKind::DomainBounds,
            "{version}"
        );
        // … and a receiver refuses to decode it.
        let mut frame = event(json!({"kind": "session_start", "restored": false}));
        frame["request"]["operation"]["event"]["protocol_version"] = json!(version);
        assert_eq!(
            decode_parent_frame(&bytes(&frame)).unwrap_err().kind(),
            ErrorKind::DomainBounds,
            "{version}"
        );
    }
    // The parent session refuses to send it without poisoning itself: nothing
    // reached the wire.
    let mut parent = ParentSession::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_script_profile(),
            None,
            true,
        ))
        .unwrap();
    parent
        .receive(WorkerFrame::Response {
            response: Response::success(1, Value::Null),
        })
        .unwrap();
    assert_eq!(
        parent.send(&event_request(1)).unwrap_err().kind(),
        ErrorKind::DomainBounds
    );
    assert_eq!(parent.state(), SessionState::Ready);
    parent.send(&event_request(2)).unwrap();
    assert_eq!(parent.state(), SessionState::Busy);
}
