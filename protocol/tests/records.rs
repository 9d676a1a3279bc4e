#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §6.9, §6.10, §7.2: domain bounds of every record, checked on decode and on encode.

mod common;

use common::*;
use quirl_lua_protocol::limits::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

fn worker_kind(value: &Value) -> ErrorKind {
    decode_worker_frame(&bytes(value)).unwrap_err().kind()
}

fn parent_kind(value: &Value) -> ErrorKind {
    decode_parent_frame(&bytes(value)).unwrap_err().kind()
}

fn with_error(error: Value) -> Value {
    let mut frame = response_err();
    frame["response"]["error"] = error;
    frame
}

#[test]
fn error_record_allows_64_items_per_list_and_rejects_65() {
    for list in ["labels", "context", "help"] {
        let item = if list == "labels" {
            json!({"source": null, "start": 0, "end": 0, "message": "m"})
        } else {
            json!("x")
        };
        let mut record = error_record();
        record[list] = Value::Array(vec![item.clone(); ERROR_ITEMS_MAX]);
        assert!(
            decode_worker_frame(&bytes(&with_error(record.clone()))).is_ok(),
            "{list}"
        );
        record[list] = Value::Array(vec![item; ERROR_ITEMS_MAX + 1]);
        assert_eq!(
            worker_kind(&with_error(record)),
            ErrorKind::ErrorRecordBounds,
            "{list}"
        );
    }
}

#[test]
fn error_record_allows_256_kib_of_text_and_rejects_one_byte_more() {
    let mut record = error_record();
    let used = ShellError::new(ErrorCode::Lua, "").text_bytes();
    let others = "return x".len() + "here".len() + 2; // label source + message, context, help
    record["message"] = json!("m".repeat(ERROR_TEXT_BYTES_MAX - others - used));
    assert!(decode_worker_frame(&bytes(&with_error(record.clone()))).is_ok());
    record["command"] = json!("c");
    assert_eq!(
        worker_kind(&with_error(record)),
        ErrorKind::ErrorRecordBounds
    );
}

#[test]
fn error_label_spans_are_ordered_and_on_utf8_boundaries() {
    let label = |source: Value, start: u32, end: u32| {
        let mut record = error_record();
        record["labels"] = json!([{"source": source, "start": start, "end": end, "message": "m"}]);
        with_error(record)
    };
    assert_eq!(
        worker_kind(&label(json!(null), 2, 1)),
        ErrorKind::ErrorRecordBounds
    );
    assert_eq!(
        worker_kind(&label(json!("abc"), 2, 1)),
        ErrorKind::ErrorRecordBounds
    );
    assert_eq!(
        worker_kind(&label(json!("é"), 1, 2)),
        ErrorKind::ErrorRecordBounds
    );
    assert!(decode_worker_frame(&bytes(&label(json!("é"), 0, 2))).is_ok());
    assert!(decode_worker_frame(&bytes(&label(json!(null), u32::MAX, u32::MAX))).is_ok());
    // Quirl checks boundaries only where the span lies inside its source.
    assert!(decode_worker_frame(&bytes(&label(json!("abc"), 1, 10))).is_ok());
}

#[test]
fn error_codes_are_the_nine_of_v1() {
    let names: Vec<_> = ErrorCode::ALL.iter().map(|code| code.as_str()).collect();
    assert_eq!(
        names,
        [
            "invalid_command",
            "invalid_argument",
            "data",
            "io",
            "process_spawn",
            "script_read",
            "lua",
            "validation",
            "resource_limit"
        ]
    );
    let mut record = error_record();
    record["code"] = json!("fatal");
    assert_eq!(worker_kind(&with_error(record)), ErrorKind::UnknownVariant);
}

#[test]
fn response_fields_must_agree() {
    let ok_with_error = json!({"kind": "response", "response": {"version": 1, "id": 1, "ok": true, "result": null, "error": error_record()}});
    assert_eq!(worker_kind(&ok_with_error), ErrorKind::InconsistentResponse);
    let failure_without_error = json!({"kind": "response", "response": {"version": 1, "id": 1, "ok": false, "result": null}});
    assert_eq!(
        worker_kind(&failure_without_error),
        ErrorKind::InconsistentResponse
    );
    let failure_with_result = json!({"kind": "response", "response": {"version": 1, "id": 1, "ok": false, "result": 1, "error": error_record()}});
    assert_eq!(
        worker_kind(&failure_with_result),
        ErrorKind::InconsistentResponse
    );
}

// SPEC §6.7-a, §9.2-e
#[test]
fn host_response_carries_exactly_one_of_outcome_and_error() {
    let mut both = host_response_outcome();
    both["response"]["error"] = error_record();
    assert_eq!(parent_kind(&both), ErrorKind::InconsistentHostResponse);
    let mut neither = host_response_outcome();
    neither["response"]
        .as_object_mut()
        .unwrap()
        .remove("outcome");
    assert_eq!(parent_kind(&neither), ErrorKind::InconsistentHostResponse);
}

#[test]
fn host_call_command_and_output_limits() {
    let mut call = host_call();
    call["call"]["command"] = json!("x".repeat(HOST_COMMAND_BYTES_MAX));
    assert!(decode_worker_frame(&bytes(&call)).is_ok());
    call["call"]["command"] = json!("x".repeat(HOST_COMMAND_BYTES_MAX + 1));
    assert_eq!(worker_kind(&call), ErrorKind::DomainBounds);
    let mut call = host_call();
    call["call"]["max_output_bytes"] = json!(HOST_OUTPUT_BYTES_MAX);
    assert!(decode_worker_frame(&bytes(&call)).is_ok());
    call["call"]["max_output_bytes"] = json!(HOST_OUTPUT_BYTES_MAX + 1);
    assert_eq!(worker_kind(&call), ErrorKind::DomainBounds);
}

#[test]
fn sources_are_bounded_by_the_source_limit() {
    let frame = |len: usize| request(json!({"operation": "eval", "source": "x".repeat(len)}));
    assert!(decode_parent_frame(&bytes(&frame(SOURCE_BYTES_MAX))).is_ok());
    assert_eq!(
        parent_kind(&frame(SOURCE_BYTES_MAX + 1)),
        ErrorKind::DomainBounds
    );
    let encoded = encode_parent_frame(&ParentFrame::Request {
        request: Request {
            id: 1,
            operation: Operation::Eval {
                source: "x".repeat(SOURCE_BYTES_MAX + 1),
            },
        },
    });
    assert_eq!(
        encoded.unwrap_err().kind(),
        ErrorKind::DomainBounds,
        "the sender checks too"
    );
}

#[test]
fn plugin_command_deadline_is_positive() {
    let frame = request(
        json!({"operation": "plugin_command", "name": "c", "context": context(), "deadline_ms": 0}),
    );
    assert_eq!(parent_kind(&frame), ErrorKind::DomainBounds);
}

#[test]
fn structured_values_are_bounded_in_depth() {
    let nest = |depth: usize| {
        let mut value = json!({"type": "nothing"});
        for _ in 0..depth {
            value = json!({"type": "list", "value": [value]});
        }
        value
    };
    // Depth 64 fits Quirl's bound but not serde_json's recursion limit
    // inside the run envelope, so the JSON depth limit speaks first.
    assert!(decode_parent_frame(&bytes(&value_input(nest(50)))).is_ok());
    assert_eq!(
        parent_kind(&value_input(nest(VALUE_DEPTH_MAX + 1))),
        ErrorKind::DepthExceeded
    );
    let deep = StructuredValue::List(vec![]);
    let mut value = deep;
    for _ in 0..=VALUE_DEPTH_MAX {
        value = StructuredValue::List(vec![value]);
    }
    assert_eq!(
        value.validate().unwrap_err().kind(),
        ErrorKind::DomainBounds
    );
    let wide = StructuredValue::List(vec![StructuredValue::Nothing; VALUE_NODES_MAX]);
    assert_eq!(wide.validate().unwrap_err().kind(), ErrorKind::DomainBounds);
}

#[test]
fn structured_record_keys_are_unique_and_keep_their_order() {
    let frame = value_input(
        json!({"type": "record", "value": {"b": {"type": "nothing"}, "a": {"type": "nothing"}}}),
    );
    let text = String::from_utf8(bytes(&frame)).unwrap();
    let reordered = text.replace(
        r#""a":{"type":"nothing"},"b":{"type":"nothing"}"#,
        r#""b":{"type":"nothing"},"a":{"type":"nothing"}"#,
    );
    let decoded = decode_parent_frame(reordered.as_bytes()).unwrap();
    let encoded = String::from_utf8(encode_parent_frame(&decoded).unwrap()).unwrap();
    assert!(
        encoded.contains(r#"{"b":{"type":"nothing"},"a":{"type":"nothing"}}"#),
        "{encoded}"
    );
    let dup = reordered.replace(
        r#""b":{"type":"nothing"},"a""#,
        r#""b":{"type":"nothing"},"b""#,
    );
    assert_eq!(
        decode_parent_frame(dup.as_bytes()).unwrap_err().kind(),
        ErrorKind::DuplicateKey
    );
}

#[test]
fn execution_context_bounds() {
    let run = |context: Value| {
        request(json!({"operation": "run", "source": "x", "source_name": "r", "context": context}))
    };
    let mut c = context();
    c["arguments"] = Value::Array(vec![json!(""); ARGUMENTS_MAX + 1]);
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["environment"] = json!({"A=B": "x"});
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["environment"] = json!({"A": "x\u{0}"});
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["working_directory"] = json!("");
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["output"] = json!({"kind": "capture", "max_bytes_per_stream": 0});
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["output"] = json!({"kind": "capture", "max_bytes_per_stream": CAPTURE_BYTES_MAX + 1});
    assert_eq!(parent_kind(&run(c)), ErrorKind::DomainBounds);
    let mut c = context();
    c["input"] = json!({"kind": "bytes", "content": [256]});
    assert_eq!(parent_kind(&run(c)), ErrorKind::IntegerOutOfRange);
}

#[test]
fn every_typed_result_decodes_and_round_trips_canonically() {
    for (name, kind, value) in results() {
        let typed = OperationResult::decode(kind, &value).unwrap();
        assert!(typed.fits(kind), "{name}");
        assert_eq!(typed.to_value().unwrap(), value, "{name}");
        // The canonical form is sorted-key compact JSON, as Quirl writes it.
        let response = WorkerFrame::Response {
            response: Response::success(1, typed.to_value().unwrap()),
        };
        let encoded = encode_worker_frame(&response).unwrap();
        let expected = format!(
            r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{}}}}}"#,
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(String::from_utf8(encoded).unwrap(), expected, "{name}");
    }
}

#[test]
fn typed_results_reject_wrong_shapes() {
    assert_eq!(
        OperationResult::decode(OperationKind::Check, &json!(1))
            .unwrap_err()
            .kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        OperationResult::decode(OperationKind::Test, &json!(-1))
            .unwrap_err()
            .kind(),
        ErrorKind::IntegerOutOfRange
    );
    assert_eq!(
        OperationResult::decode(OperationKind::Run, &json!([]))
            .unwrap_err()
            .kind(),
        ErrorKind::NotAnObject
    );
    let mut outcome = outcome(json!({"kind": "inherited"}));
    outcome["diagnostics"] = Value::Array(vec![error_record(); DIAGNOSTICS_MAX + 1]);
    assert_eq!(
        OperationResult::decode(OperationKind::Run, &outcome)
            .unwrap_err()
            .kind(),
        ErrorKind::DomainBounds
    );
    let mut reports = reports();
    reports[0]["actions"] = Value::Array(vec![
        json!({"action": "diagnose", "message": "m"});
        EVENT_ACTIONS_MAX + 1
    ]);
    assert_eq!(
        OperationResult::decode(OperationKind::Event, &reports)
            .unwrap_err()
            .kind(),
        ErrorKind::DomainBounds
    );
}

#[test]
fn plugin_registrations_repeat_quirl_bounds() {
    let check = |mutate: &dyn Fn(&mut Value)| {
        let mut value = registrations();
        mutate(&mut value);
        OperationResult::decode(OperationKind::LoadPlugin, &value)
            .map(drop)
            .map_err(|e| e.kind())
    };
    assert_eq!(check(&|_| {}), Ok(()));
    assert_eq!(
        check(&|v| v["prompt_segments"][0]["deadline_ms"] = json!(0)),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["prompt_segments"][0]["deadline_ms"] = json!(PROMPT_DEADLINE_MS_MAX + 1)),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["prompt_segments"][0]["name"] = json!(" ")),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["prompt_segments"][0]["name"] =
            json!("x".repeat(REGISTRATION_NAME_BYTES_MAX + 1))),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["prompt_segments"] =
            Value::Array(vec![json!({"name": "a", "deadline_ms": 8}); 2])),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["commands"][0]["input_type"] = json!("Stream<String>")),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["commands"][0]["examples"] = json!([])),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["commands"][0]["error_codes"] = json!({})),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["commands"][0]["summary"] = json!("a\u{1b}[31m")),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["events"][0]["capabilities"] = json!(["plan_rewrite"])),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["events"][0]["events"] = json!(["output", "output"])),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["events"][0]["deadline_ms"] = json!(EXTENSION_DEADLINE_MS_MAX + 1)),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["contributions"][0]["plain_fallback"] = json!(null)),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["contributions"][0]["name"] = json!("bad name")),
        Err(ErrorKind::DomainBounds)
    );
    assert_eq!(
        check(&|v| v["events"][0]["events"] = json!(["nope"])),
        Err(ErrorKind::UnknownVariant)
    );
}

#[test]
fn annotation_values_are_bounded() {
    let mut deep = json!(1);
    for _ in 0..=ANNOTATION_DEPTH_MAX {
        deep = json!([deep]);
    }
    let mut reports = reports();
    reports[0]["actions"] = json!([{"action": "annotate_result", "key": "k", "value": deep}]);
    assert_eq!(
        OperationResult::decode(OperationKind::Event, &reports)
            .unwrap_err()
            .kind(),
        ErrorKind::DomainBounds
    );
}

#[test]
fn error_kinds_have_stable_names_and_codes() {
    for kind in ErrorKind::ALL {
        assert_eq!(ErrorKind::from_name(kind.as_str()), Some(*kind));
    }
    assert_eq!(ErrorKind::OversizedFrame.code(), ErrorCode::ResourceLimit);
    assert_eq!(ErrorKind::TruncatedFrame.code(), ErrorCode::Io);
    assert_eq!(ErrorKind::TruncatedHeader.code(), ErrorCode::Io);
    assert_eq!(ErrorKind::UnknownField.code(), ErrorCode::Validation);
    let error = decode_parent_frame(br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":1}}}"#).unwrap_err();
    assert_eq!(error.context(), "request.operation.source");
    assert_eq!(
        error.to_string(),
        "wrong_type: expected a string, found a number (at request.operation.source)"
    );
    let record = error.to_shell_error();
    assert_eq!(record.code, ErrorCode::Validation);
    assert!(record.validate().is_ok());
}

#[test]
fn every_error_code_round_trips_through_its_wire_name() {
    for &code in quirl_lua_protocol::records::ErrorCode::ALL {
        assert_eq!(
            quirl_lua_protocol::records::ErrorCode::from_name(code.as_str()),
            Some(code)
        );
    }
    assert_eq!(
        quirl_lua_protocol::records::ErrorCode::from_name("timeout"),
        None
    );
    assert_eq!(quirl_lua_protocol::records::ErrorCode::ALL.len(), 9);
}
