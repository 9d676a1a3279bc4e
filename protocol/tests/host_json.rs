//! A host's own JSON of the records, shaped as Quirl 0.1 serializes its
//! types (`quirl-core`'s `ShellError` flattens `ErrorDetails`, whose
//! `labels`/`context`/`help` are skipped when empty and `command`/
//! `exit_status` when `None`; `quirl-lua`'s `EventHandlerReport` skips
//! `error: None`; `ExecutionOutcome` embeds such error records), decodes
//! through `records::StrictDecode` with each optional member left out, and
//! is refused with an unknown member, a wrong type or a value out of range.
//! Wire bytes stay exactly as strict as SPEC §5.9 says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::ErrorKind;
use quirl_lua_protocol::records::{
    CleanupState, ErrorCode, ErrorLabel, EventHandlerReport, ExecutionOutcome, ExecutionOutput,
    ExecutionStatus, ExtensionAction, OperationKind, OperationResult, ShellError, StrictDecode,
    StructuredValue,
};
use quirl_lua_protocol::{decode_worker_frame, limits::ERROR_ITEMS_MAX};
use serde_json::{Value, json};

/// Every member of a Quirl error record, as Quirl writes a full one.
fn full_error() -> Value {
    json!({
        "code": "invalid_command",
        "message": "command exited with status 3",
        "labels": [{"source": "ls -z", "start": 3, "end": 5, "message": "this option"}],
        "context": ["stderr: ls: invalid option -- 'z'"],
        "help": ["see ls --help"],
        "command": "ls -z",
        "exit_status": 3
    })
}

fn full_record() -> ShellError {
    ShellError::new(ErrorCode::InvalidCommand, "command exited with status 3")
        .with_label(Some("ls -z".into()), 3, 5, "this option")
        .with_context("stderr: ls: invalid option -- 'z'")
        .with_help("see ls --help")
        .with_command("ls -z")
        .with_exit_status(3)
}

/// What the record is with the member `name` left out.
fn without(name: &str) -> ShellError {
    let mut record = full_record();
    match name {
        "labels" => record.labels.clear(),
        "context" => record.context.clear(),
        "help" => record.help.clear(),
        "command" => record.command = None,
        "exit_status" => record.exit_status = None,
        other => unreachable!("{other} is not optional"),
    }
    record
}

const OPTIONAL: [&str; 5] = ["labels", "context", "help", "command", "exit_status"];

fn omit(mut value: Value, name: &str) -> Value {
    value.as_object_mut().unwrap().remove(name);
    value
}

fn with_member(mut value: Value, name: &str, member: Value) -> Value {
    value.as_object_mut().unwrap().insert(name.into(), member);
    value
}

#[test]
fn quirl_shaped_error_records_decode_with_each_optional_member_left_out() {
    assert_eq!(
        ShellError::from_json_value(&full_error()).unwrap(),
        full_record()
    );
    for name in OPTIONAL {
        let json = omit(full_error(), name);
        assert_eq!(
            ShellError::from_json_value(&json).unwrap(),
            without(name),
            "{name}"
        );
        // The same through text, as a host that keeps JSON text has it.
        assert_eq!(
            ShellError::from_json_str(&json.to_string()).unwrap(),
            without(name),
            "{name}"
        );
    }
    // Everything left out at once: Quirl's `ShellError::new(code, message)`.
    let bare = json!({"code": "lua", "message": "boom"});
    assert_eq!(
        ShellError::from_json_value(&bare).unwrap(),
        ShellError::new(ErrorCode::Lua, "boom")
    );
    // A `source` left out of a label is `None` as well.
    let label = json!({"start": 0, "end": 1, "message": "here"});
    assert_eq!(
        ErrorLabel::from_json_value(&label).unwrap(),
        ErrorLabel {
            source: None,
            start: 0,
            end: 1,
            message: "here".into()
        }
    );
}

#[test]
fn quirl_shaped_error_records_are_refused_with_an_unknown_member_a_wrong_type_or_out_of_range() {
    for name in OPTIONAL {
        let json = with_member(omit(full_error(), name), "details", json!({}));
        let error = ShellError::from_json_value(&json).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnknownField, "{name}: {error}");
    }
    let bare = json!({"code": "lua", "message": "boom"});
    assert_eq!(
        ShellError::from_json_value(&with_member(bare.clone(), "colour", json!(1)))
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownField
    );
    // Required members stay required.
    assert_eq!(
        ShellError::from_json_value(&omit(bare.clone(), "message"))
            .unwrap_err()
            .kind(),
        ErrorKind::MissingField
    );
    // Wrong types, present or not.
    for (name, wrong) in [
        ("labels", json!("none")),
        ("context", json!({})),
        ("exit_status", json!("3")),
        ("command", json!(7)),
    ] {
        let json = with_member(bare.clone(), name, wrong);
        assert_eq!(
            ShellError::from_json_value(&json).unwrap_err().kind(),
            ErrorKind::WrongType,
            "{name}"
        );
    }
    // Out of range: an `i32` status past its width, a label offset past
    // `u32` (Quirl writes its `usize` offsets as `u64`), too many items.
    let json = with_member(bare.clone(), "exit_status", json!(2_147_483_648_i64));
    assert_eq!(
        ShellError::from_json_value(&json).unwrap_err().kind(),
        ErrorKind::IntegerOutOfRange
    );
    let label = json!([{"source": null, "start": 4_294_967_296_u64, "end": 4_294_967_297_u64, "message": ""}]);
    let json = with_member(bare.clone(), "labels", label);
    assert_eq!(
        ShellError::from_json_value(&json).unwrap_err().kind(),
        ErrorKind::IntegerOutOfRange
    );
    let json = with_member(bare, "help", json!(vec!["x"; ERROR_ITEMS_MAX + 1]));
    assert_eq!(
        ShellError::from_json_value(&json).unwrap_err().kind(),
        ErrorKind::ErrorRecordBounds
    );
}

#[test]
fn quirl_shaped_event_handler_reports_decode_with_error_left_out() {
    // `EventHandlerReport` skips `error: None`.
    let report =
        json!({"handler": "on_plan", "actions": [{"action": "diagnose", "message": "hi"}]});
    let decoded = EventHandlerReport::from_json_value(&report).unwrap();
    assert_eq!(
        decoded,
        EventHandlerReport {
            handler: "on_plan".into(),
            actions: vec![ExtensionAction::Diagnose {
                message: "hi".into()
            }],
            error: None,
        }
    );
    // A failed handler: its error record leaves out its empty members too.
    let failed =
        json!({"handler": "on_plan", "actions": [], "error": {"code": "lua", "message": "boom"}});
    let decoded = EventHandlerReport::from_json_value(&failed).unwrap();
    assert_eq!(decoded.error, Some(ShellError::new(ErrorCode::Lua, "boom")));
    // `error: null` (a host whose serde writes `None`) is the same.
    let null = with_member(report.clone(), "error", Value::Null);
    assert_eq!(
        EventHandlerReport::from_json_value(&null).unwrap().error,
        None
    );
    // A list of them, as the `event` result is.
    let reports = json!([failed, report]);
    assert_eq!(
        Vec::<EventHandlerReport>::from_json_value(&reports)
            .unwrap()
            .len(),
        2
    );
    // Refused: an unknown member, a wrong type.
    let unknown = with_member(report.clone(), "elapsed_ms", json!(3));
    assert_eq!(
        EventHandlerReport::from_json_value(&unknown)
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownField
    );
    let wrong = with_member(report, "actions", json!({}));
    assert_eq!(
        EventHandlerReport::from_json_value(&wrong)
            .unwrap_err()
            .kind(),
        ErrorKind::WrongType
    );
}

fn quirl_outcome() -> Value {
    json!({
        "status": {"kind": "exited", "code": 0},
        "output": {"kind": "value", "value": {"type": "int", "value": 42}},
        "diagnostics": [
            {"code": "data", "message": "a row was skipped", "context": ["row 3"]},
            {"code": "lua", "message": "deprecated call"}
        ],
        "cleanup": "complete"
    })
}

#[test]
fn quirl_shaped_execution_outcomes_decode_with_their_diagnostics_members_left_out() {
    let expected = ExecutionOutcome {
        status: ExecutionStatus::Exited(0),
        output: ExecutionOutput::Value {
            value: StructuredValue::Int(42),
        },
        diagnostics: vec![
            ShellError::new(ErrorCode::Data, "a row was skipped").with_context("row 3"),
            ShellError::new(ErrorCode::Lua, "deprecated call"),
        ],
        cleanup: CleanupState::Complete,
    };
    assert_eq!(
        ExecutionOutcome::from_json_value(&quirl_outcome()).unwrap(),
        expected
    );
    // The same as the typed result of `run`, from the host's JSON text.
    let text = quirl_outcome().to_string();
    assert_eq!(
        OperationResult::from_json_slice(OperationKind::Run, text.as_bytes()).unwrap(),
        OperationResult::Outcome(expected.clone())
    );
    // No diagnostics at all: Quirl always writes the list, a host may not.
    let bare = omit(quirl_outcome(), "diagnostics");
    assert!(
        ExecutionOutcome::from_json_value(&bare)
            .unwrap()
            .diagnostics
            .is_empty()
    );
    // Refused: an unknown member at either level, a wrong type.
    let unknown = with_member(quirl_outcome(), "duration", json!(1));
    assert_eq!(
        ExecutionOutcome::from_json_value(&unknown)
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownField
    );
    let mut nested = quirl_outcome();
    nested["diagnostics"][1]["severity"] = json!("warning");
    assert_eq!(
        ExecutionOutcome::from_json_value(&nested)
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownField
    );
    let wrong = with_member(quirl_outcome(), "cleanup", json!(true));
    assert_eq!(
        ExecutionOutcome::from_json_value(&wrong)
            .unwrap_err()
            .kind(),
        ErrorKind::WrongType
    );
    // Required members stay required: `status` has no empty value.
    assert_eq!(
        ExecutionOutcome::from_json_value(&omit(quirl_outcome(), "status"))
            .unwrap_err()
            .kind(),
        ErrorKind::MissingField
    );
}

#[test]
fn wire_bytes_stay_as_strict_as_spec_5_9_says() {
    // SPEC §5.9-c: on the wire, nullable and list members are present.
    let bare = br#"{"code":"lua","message":"boom"}"#;
    assert_eq!(
        ShellError::from_wire_slice(bare).unwrap_err().kind(),
        ErrorKind::MissingField
    );
    let frame = br#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"lua","message":"boom"}}}"#;
    assert_eq!(
        decode_worker_frame(frame).unwrap_err().kind(),
        ErrorKind::MissingField
    );
    // SPEC §5.9-d: a member omitted when empty is never null on the wire,
    // though a host's own JSON may write it so.
    let null_error = br#"{"version":1,"id":2,"ok":true,"result":1,"error":null}"#;
    assert_eq!(
        quirl_lua_protocol::records::Response::from_wire_slice(null_error)
            .unwrap_err()
            .kind(),
        ErrorKind::WrongType
    );
    assert!(quirl_lua_protocol::records::Response::from_json_slice(null_error).is_ok());
    // Options and lists of records decode too.
    assert_eq!(Option::<ShellError>::from_json_str("null").unwrap(), None);
    assert_eq!(
        Option::<ShellError>::from_json_str(r#"{"code":"io","message":"x"}"#).unwrap(),
        Some(ShellError::new(ErrorCode::Io, "x"))
    );
}
