#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §5.9: every record and every enum variant — unit variants, nested host-domain
//! records and result records included — rejects an unknown field.
//!
//! The test injects a field into every JSON object of every sample frame and
//! result. Objects that are maps or free-form values accept it; every other
//! object must fail with `unknown_field`. The records that rejected it are
//! then compared with the complete list of v1 records and variants.

mod common;

use common::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::Value;
use std::collections::BTreeSet;

fn object_paths(value: &Value, path: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            out.push(path.clone());
            for (key, child) in map {
                object_paths(child, format!("{path}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                object_paths(child, format!("{path}/{index}"), out);
            }
        }
        _ => {}
    }
}

/// Paths whose object is a map or a free-form value, where any key is data.
fn is_open(path: &str) -> bool {
    if ["typed:eval", "typed:complete", "typed:contribution"]
        .iter()
        .any(|free| path.starts_with(free))
    {
        return true;
    }
    let last = path.rsplit('/').next().unwrap_or("");
    let free_context = ["render_prompt", "complete", "contribution"];
    matches!(last, "environment" | "error_codes" | "themes" | "result")
        || path.contains("/result/") && !path.starts_with("typed:")
        || path.contains("/context/") && free_context.iter().any(|op| path.contains(op))
        || (last == "context" && free_context.iter().any(|op| path.contains(op)))
        || path.contains("annotate")
}

/// Whether the object at `path` is data: a structured `record`'s entries or an annotation value.
fn is_structured_record(sample: &Value, path: &str) -> bool {
    let Some((parent, last)) = path.rsplit_once('/') else {
        return false;
    };
    let parent = sample.pointer(parent);
    last == "value"
        && (parent.and_then(|p| p.get("type")) == Some(&Value::from("record"))
            || parent.and_then(|p| p.get("action")) == Some(&Value::from("annotate_result")))
}

fn record_of(error: &ProtocolError) -> String {
    error
        .message()
        .split(" in ")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

fn check<T>(
    name: &str,
    sample: &Value,
    decode: impl Fn(&Value) -> Result<T, ProtocolError>,
    rejected: &mut BTreeSet<String>,
) {
    assert!(decode(sample).is_ok(), "sample {name} must be valid");
    let mut paths = Vec::new();
    object_paths(sample, String::new(), &mut paths);
    for path in paths {
        let mut mutated = sample.clone();
        let target = if path.is_empty() {
            &mut mutated
        } else {
            mutated.pointer_mut(&path).unwrap()
        };
        // Maps must accept the entry, so it carries a value of their type.
        let injected = if path.ends_with("/themes") {
            config()["ui"]["themes"]["mine"].clone()
        } else if is_structured_record(sample, &path) {
            serde_json::json!({"type": "nothing"})
        } else {
            Value::from("x")
        };
        target
            .as_object_mut()
            .unwrap()
            .insert("zz_unknown".into(), injected);
        match decode(&mutated) {
            Err(error) => {
                assert_eq!(
                    error.kind(),
                    ErrorKind::UnknownField,
                    "{name} {path}: {error}"
                );
                rejected.insert(record_of(&error));
            }
            Ok(_) => assert!(
                is_open(&format!("{name}{path}")) || is_structured_record(sample, &path),
                "{name}: unknown field accepted at {path}"
            ),
        }
    }
}

const EXPECTED: &[&str] = &[
    "parent frame `request`",
    "parent frame `host_response`",
    "worker frame `response`",
    "worker frame `host_call`",
    "request",
    "response",
    "host call",
    "host response",
    "command outcome",
    "policy",
    "error record",
    "error label",
    "operation `initialize`",
    "operation `eval`",
    "operation `check`",
    "operation `load_config`",
    "operation `load_plugin`",
    "operation `render_prompt`",
    "operation `complete`",
    "operation `contribution`",
    "operation `run`",
    "operation `plugin_command`",
    "operation `event`",
    "operation `test`",
    "execution context",
    "execution effects",
    "execution input `none`",
    "execution input `bytes`",
    "execution input `value`",
    "output target `inherit`",
    "output target `capture`",
    "output target `value`",
    "structured value `nothing`",
    "structured value `bool`",
    "structured value `int`",
    "structured value `u_int`",
    "structured value `decimal`",
    "structured value `string`",
    "structured value `list`",
    "structured value `record`",
    "structured value `path`",
    "structured value `duration`",
    "structured value `size`",
    "structured value `date_time`",
    "structured value `pattern`",
    "duration",
    "size",
    "extension event",
    "extension event data `session_start`",
    "extension event data `session_restore`",
    "extension event data `directory_changed`",
    "extension event data `command_plan`",
    "extension event data `execution_progress`",
    "extension event data `output`",
    "extension event data `cancellation`",
    "extension event data `result`",
    "extension event data `error`",
    // Result records.
    "execution outcome",
    "execution status `exited`",
    "execution output `inherited`",
    "execution output `bytes`",
    "execution output `value`",
    "execution output `values`",
    "event handler report",
    "extension action `diagnose`",
    "extension action `rewrite_plan`",
    "extension action `set_environment`",
    "extension action `block_execution`",
    "extension action `annotate_result`",
    "plugin registrations",
    "prompt registration",
    "completion registration",
    "command registration",
    "event subscription",
    "contribution registration",
    "configuration",
    "editor configuration",
    "picker configuration",
    "prompt configuration",
    "ui configuration",
    "theme colors",
    "statusline configuration",
    "completion configuration",
];

// SPEC §5.9-a
#[test]
fn rejects_unknown_field_on_every_record_and_variant() {
    let mut rejected = BTreeSet::new();
    for (name, frame) in parent_frames() {
        check(
            name,
            &frame,
            |v| decode_parent_frame(&bytes(v)),
            &mut rejected,
        );
    }
    for (name, frame) in worker_frames() {
        check(
            name,
            &frame,
            |v| decode_worker_frame(&bytes(v)),
            &mut rejected,
        );
    }
    for (name, kind, result) in results() {
        let label = format!("typed:{name}");
        let label: &'static str = Box::leak(label.into_boxed_str());
        check(
            label,
            &result,
            |v| OperationResult::decode(kind, v),
            &mut rejected,
        );
    }
    let expected: BTreeSet<String> = EXPECTED.iter().map(|s| s.to_string()).collect();
    let missing: Vec<_> = expected.difference(&rejected).collect();
    let extra: Vec<_> = rejected.difference(&expected).collect();
    assert!(missing.is_empty(), "records never exercised: {missing:?}");
    assert!(extra.is_empty(), "records not in the list: {extra:?}");
}

// SPEC §5.9-b: a unit variant carries no payload member, not even null.
#[test]
fn rejects_unknown_field_in_unit_variant() {
    for frame in [
        value_input(serde_json::json!({"type": "nothing", "value": null})),
        run_with_input(serde_json::json!({"kind": "none", "content": null})),
    ] {
        let error = decode_parent_frame(&bytes(&frame)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnknownField, "{error}");
    }
}
