//! Quirl's Lua runner ABI v1 (ADR 0018): the execution context handed to
//! `main` (and to plugin command callbacks), the typed result envelope they
//! return, and the migration of unversioned (v0) results.
//!
//! The context is the protocol's `ExecutionContext`, the result of `run`
//! and `plugin_command` the protocol's `ExecutionOutcome`, written as Quirl
//! writes it (keys sorted):
//! `{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"int","value":42}},"status":{"code":0,"kind":"exited"}}`.

use crate::error::{
    ErrorCode, ITEM_BYTES_MAX, LABEL_SOURCE_BYTES_MAX, Label, OpError, ShellError,
    has_terminal_controls,
};
use crate::records_from_lua::Fields;
use quirl_lua_protocol::ProtocolError;
use quirl_lua_protocol::limits::ERROR_TEXT_BYTES_MAX;
use quirl_lua_protocol::records::{
    CleanupState, ExecutionContext, ExecutionEffects, ExecutionOutcome, ExecutionOutput,
    ExecutionStatus, OutputTarget, StructuredValue,
};
use serde_json::Value as Json;

/// Worker-only (the runner ABI's version): current runner ABI version.
pub const ABI_VERSION: u64 = 1;
/// Worker-only (runner ABI; no protocol counterpart): values in a finite
/// `values` output.
pub const STREAM_VALUES_MAX: usize = 512;
/// Worker-only (runner ABI; the protocol's error record allows more): labels,
/// context and help items of an error record a script returns.
pub const RUNNER_ERROR_ITEMS_MAX: usize = 32;
/// Worker-only (runner ABI): bytes of a module field name.
const MODULE_FIELD_BYTES_MAX: usize = 128;

/// Declared effect names in Quirl's order.
pub fn effect_names(effects: ExecutionEffects) -> Vec<&'static str> {
    [
        (effects.read_filesystem, "read_filesystem"),
        (effects.write_filesystem, "write_filesystem"),
        (effects.spawn_process, "spawn_process"),
        (effects.change_directory, "change_directory"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}

/// ABI validation failure.
pub fn abi_error(message: impl Into<String>) -> OpError {
    OpError::validation("Lua runner ABI validation failed")
        .with_context(message)
        .with_help("Follow the generated typed Lua runner ABI")
}

/// ABI bound exceeded.
pub fn limit_error(what: &str, limit: usize, observed: usize) -> OpError {
    OpError::resource_limit(format!("{what} exceeds its configured limit"))
        .with_context(format!("limit: {limit}; observed: {observed}"))
        .with_help("Reduce the retained runner data or use a bounded engine-owned stream")
}

/// A protocol bound a runner value or context exceeds.
fn protocol_limit(what: &str, error: &ProtocolError) -> OpError {
    let mut detail = error.message().to_owned();
    if !error.context().is_empty() {
        detail = format!("{detail} (at `{}`)", error.context());
    }
    OpError::resource_limit(format!("{what} exceeds its configured limit"))
        .with_context(detail)
        .with_help("Reduce the retained runner data or use a bounded engine-owned stream")
}

/// ABI mismatch in the module or its result, labelled with the source name.
pub fn boundary_error(source: &str, message: impl Into<String>) -> OpError {
    OpError::validation("Lua runner ABI validation failed")
        .with_context(message)
        .with_label(Label {
            source: Some(source.to_owned()),
            start: 0,
            end: 0,
            message: "runner ABI mismatch".to_owned(),
        })
        .with_help("Follow the generated `quirl.Context` and `quirl.RunnerResult` contracts")
}

/// A module or result declared an ABI version this worker does not read.
pub fn unsupported_abi(version: u64) -> OpError {
    OpError::validation("unsupported Lua runner ABI version")
        .with_context(format!(
            "requested: {version}; supported: {ABI_VERSION}; oldest readable: 0"
        ))
        .with_help("Regenerate the Lua SDK and migrate the module to the supported runner ABI")
}

/// Quirl's `LuaRunnerContext::validate`: the protocol's context bounds
/// (the decoder checked them already; an in-process caller may not have),
/// then the ABI's own rule that only typed value output is supported —
/// or, where the VM holds the capability `lua.io` (`capture_allowed`),
/// captured output too (DESIGN §15.3 "The `lua.io` capability").
pub fn check_context(context: &ExecutionContext, capture_allowed: bool) -> Result<(), OpError> {
    context
        .validate()
        .map_err(|e| protocol_limit("Lua runner context", &e))?;
    match context.output {
        OutputTarget::Value => Ok(()),
        OutputTarget::Capture { .. } if capture_allowed => Ok(()),
        OutputTarget::Inherit | OutputTarget::Capture { .. } => Err(abi_error(
            "Lua runner ABI v1 supports typed value output only",
        )
        .with_help(if capture_allowed {
            "Select value output, or capture output (the capability lua.io)"
        } else {
            "Select value output or use a byte-oriented execution adapter (captured output needs the capability lua.io)"
        })),
    }
}

/// What a script wrote, when its context asked for captured output
/// (`capture`, with the capability `lua.io`): the outcome's output, and a
/// diagnostic for each stream that reached its capture bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    /// The `bytes` output.
    pub output: ExecutionOutput,
    /// `resource_limit` diagnostics of streams cut at the bound.
    pub diagnostics: Vec<ShellError>,
}

impl Captured {
    /// The bytes written to each stream, and which reached `bound`.
    pub fn new(stdout: Vec<u8>, stderr: Vec<u8>, cut: [bool; 2], bound: u64) -> Self {
        let diagnostics = [("standard output", cut[0]), ("standard error", cut[1])]
            .into_iter()
            .filter(|(_, cut)| *cut)
            .map(|(stream, _)| {
                let error: ShellError = OpError::resource_limit(format!(
                    "the script's {stream} reached its capture bound; what it wrote past it was dropped"
                ))
                .with_context("limit: output")
                .with_context(format!("observed: more than {bound} bytes; limit: {bound} bytes"))
                .with_help("Write less, or raise max_bytes_per_stream of the capture output")
                .into();
                error
            })
            .collect();
        Self {
            output: ExecutionOutput::Bytes { stdout, stderr },
            diagnostics,
        }
    }
}
/// The wire form of a context part (input, output target) as it reaches Lua.
pub fn wire_json<T: serde::Serialize>(value: &T) -> Result<Json, OpError> {
    serde_json::to_value(value)
        .map_err(|e| abi_error(format!("execution context cannot be represented: {e}")))
}

/// Read a structured value (`{type, value}`, from the JSON form of a Lua
/// table) into the protocol's record.
fn structured_at(value: &Json) -> Result<StructuredValue, OpError> {
    let object = value
        .as_object()
        .ok_or_else(|| abi_error("a structured value must be a `{type, value}` table"))?;
    if let Some(key) = object.keys().find(|k| *k != "type" && *k != "value") {
        return Err(abi_error(format!(
            "unknown field `{key}` in a structured value"
        )));
    }
    let kind = object
        .get("type")
        .and_then(Json::as_str)
        .ok_or_else(|| abi_error("a structured value needs a string `type`"))?;
    let content = object.get("value");
    let need = |what: &str| content_error(kind, what);
    let text = || {
        content
            .and_then(Json::as_str)
            .map(str::to_owned)
            .ok_or_else(|| need("a string"))
    };
    Ok(match kind {
        "nothing" => {
            if content.is_some_and(|c| !c.is_null()) {
                return Err(abi_error("a `nothing` value has no content"));
            }
            StructuredValue::Nothing
        }
        "bool" => StructuredValue::Bool(
            content
                .and_then(Json::as_bool)
                .ok_or_else(|| need("a boolean"))?,
        ),
        "int" => StructuredValue::Int(
            content
                .and_then(Json::as_i64)
                .ok_or_else(|| need("an integer"))?,
        ),
        "u_int" => StructuredValue::UInt(
            content
                .and_then(Json::as_u64)
                .ok_or_else(|| need("a non-negative integer"))?,
        ),
        "decimal" => StructuredValue::Decimal(text()?),
        "string" => StructuredValue::String(text()?),
        "path" => StructuredValue::Path(text()?),
        "date_time" => StructuredValue::DateTime(text()?),
        "pattern" => StructuredValue::Pattern(text()?),
        "list" => structured_list(content)?,
        "record" => structured_record(content)?,
        "duration" | "size" => structured_measure(kind, content)?,
        other => {
            return Err(abi_error(format!(
                "unknown structured value type `{other}`"
            )));
        }
    })
}

/// A structured value of type `kind` whose content is not `what` it needs.
fn content_error(kind: &str, what: &str) -> OpError {
    abi_error(format!("a `{kind}` value needs {what}"))
}

/// A `list` value's items (an empty table reads as an empty list).
fn structured_list(content: Option<&Json>) -> Result<StructuredValue, OpError> {
    let items: &[Json] = match content {
        Some(Json::Array(items)) => items,
        Some(Json::Object(map)) if map.is_empty() => &[],
        _ => return Err(content_error("list", "a list")),
    };
    Ok(StructuredValue::List(
        items.iter().map(structured_at).collect::<Result<_, _>>()?,
    ))
}

/// A `record` value's members.
fn structured_record(content: Option<&Json>) -> Result<StructuredValue, OpError> {
    let map = content
        .and_then(Json::as_object)
        .ok_or_else(|| content_error("record", "a record"))?;
    Ok(StructuredValue::Record(
        map.iter()
            .map(|(key, item)| Ok((key.clone(), structured_at(item)?)))
            .collect::<Result<_, OpError>>()?,
    ))
}

/// A `duration` (`{nanoseconds = n}`) or `size` (`{bytes = n}`) value.
fn structured_measure(kind: &str, content: Option<&Json>) -> Result<StructuredValue, OpError> {
    let field = if kind == "duration" {
        "nanoseconds"
    } else {
        "bytes"
    };
    let inner = content
        .and_then(Json::as_object)
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get(field))
        .and_then(Json::as_u64)
        .ok_or_else(|| content_error(kind, &format!("`{{{field} = <unsigned integer>}}`")))?;
    Ok(if kind == "duration" {
        StructuredValue::Duration { nanoseconds: inner }
    } else {
        StructuredValue::Size { bytes: inner }
    })
}

/// Read a structured value and check it against the protocol's value
/// bounds (nodes, depth, text).
pub fn structured(value: &Json) -> Result<StructuredValue, OpError> {
    let value = structured_at(value)?;
    value
        .validate()
        .map_err(|e| protocol_limit("structured value", &e))?;
    Ok(value)
}

/// Quirl's `StructuredValue::from_json` for unversioned results: plain JSON
/// becomes tagged values (integers stay `int`/`u_int`, other numbers become
/// `decimal` text).
pub fn structured_from_plain(value: &Json) -> StructuredValue {
    match value {
        Json::Null => StructuredValue::Nothing,
        Json::Bool(b) => StructuredValue::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => StructuredValue::Int(i),
            (_, Some(u)) => StructuredValue::UInt(u),
            _ => StructuredValue::Decimal(n.to_string()),
        },
        Json::String(s) => StructuredValue::String(s.clone()),
        Json::Array(items) => {
            StructuredValue::List(items.iter().map(structured_from_plain).collect())
        }
        Json::Object(map) => StructuredValue::Record(
            map.iter()
                .map(|(k, v)| (k.clone(), structured_from_plain(v)))
                .collect(),
        ),
    }
}

/// A successful outcome with `output` and exit status `status`, in its wire
/// form.
pub fn outcome(status: i32, output: ExecutionOutput) -> Result<Json, OpError> {
    outcome_with(status, output, Vec::new())
}

/// [`outcome`] with diagnostics.
fn outcome_with(
    status: i32,
    output: ExecutionOutput,
    diagnostics: Vec<ShellError>,
) -> Result<Json, OpError> {
    let outcome = ExecutionOutcome {
        status: ExecutionStatus::Exited(status),
        output,
        diagnostics,
        cleanup: CleanupState::Complete,
    };
    serde_json::to_value(&outcome)
        .map_err(|e| abi_error(format!("the execution outcome cannot be represented: {e}")))
}

/// The outcome of a script that called `os.exit(status)` (the capability
/// `lua.os`): that status, and its captured output, or no value.
pub fn exit_outcome(status: i32, captured: Option<Captured>) -> Result<Json, OpError> {
    match captured {
        Some(captured) => outcome_with(status, captured.output, captured.diagnostics),
        None => outcome(
            status,
            ExecutionOutput::Value {
                value: StructuredValue::Nothing,
            },
        ),
    }
}

/// The v0 migration: any JSON-compatible value, with an optional integer
/// `status` field. With captured output the value gives only the status;
/// the output is what the script wrote.
pub fn legacy_outcome(value: &Json, captured: Option<Captured>) -> Result<Json, OpError> {
    let status = match value.get("status") {
        None => 0,
        Some(status) => {
            let status = status.as_i64().ok_or_else(|| {
                abi_error("legacy Lua runner result status must be an integer")
                    .with_help("Return an ABI v1 typed result or omit the legacy `status` field")
            })?;
            i32::try_from(status).map_err(|_| {
                abi_error("legacy Lua runner result status is outside the i32 range")
            })?
        }
    };
    if let Some(captured) = captured {
        return outcome_with(status, captured.output, captured.diagnostics);
    }
    let value = structured_from_plain(value);
    value
        .validate()
        .map_err(|e| protocol_limit("structured value", &e))?;
    outcome(status, ExecutionOutput::Value { value })
}

fn error_text(what: &str, value: &str) -> Result<(), OpError> {
    if value.len() > ITEM_BYTES_MAX {
        return Err(limit_error(what, ITEM_BYTES_MAX, value.len()));
    }
    if has_terminal_controls(value) {
        return Err(abi_error(format!(
            "{what} contains forbidden terminal control bytes"
        )));
    }
    Ok(())
}

fn read_label(value: &Json) -> Result<Label, String> {
    let mut fields = Fields::of(value, "error.labels")?;
    let label = Label {
        source: fields.optional_string("source")?,
        start: fields.integer("start")?,
        end: fields.integer("end")?,
        message: fields.string("message")?,
    };
    fields.finish().map(|()| label)
}

/// Read the `error` of a failed result into the protocol's error record,
/// within the runner ABI's bounds; it must also pass the record's own
/// validation.
/// Read the members of an ABI v1 result error: its code name and the record
/// (with a placeholder code until the name is checked).
fn read_script_error(value: &Json) -> Result<(String, ShellError), String> {
    let mut fields = Fields::of(value, "error")?;
    let code = fields.string("code")?;
    let message = fields.string("message")?;
    let labels = fields
        .optional_list("labels")?
        .unwrap_or_default()
        .iter()
        .map(read_label)
        .collect::<Result<Vec<_>, _>>()?;
    let record = ShellError {
        code: ErrorCode::Lua,
        message,
        labels,
        context: fields.optional_strings("context")?.unwrap_or_default(),
        help: fields.optional_strings("help")?.unwrap_or_default(),
        command: fields.optional_string("command")?,
        exit_status: fields.optional_integer("exit_status")?,
    };
    fields.finish().map(|()| (code, record))
}

/// A script's ABI v1 result error, read and held to the error bounds
/// (item counts, terminal-safe text, labels, retained bytes).
fn script_error(value: &Json) -> Result<OpError, OpError> {
    let (code, mut record) = read_script_error(value)
        .map_err(|e| abi_error(format!("invalid ABI v1 result error: {e}")))?;
    record.code = ErrorCode::from_name(&code)
        .ok_or_else(|| abi_error(format!("unknown error code `{code}`")))?;
    error_text("Lua ShellError message", &record.message)?;
    for (what, count) in [
        ("labels", record.labels.len()),
        ("context", record.context.len()),
        ("help", record.help.len()),
    ] {
        if count > RUNNER_ERROR_ITEMS_MAX {
            return Err(limit_error(
                &format!("Lua ShellError {what}"),
                RUNNER_ERROR_ITEMS_MAX,
                count,
            ));
        }
    }
    for item in record.context.iter().chain(&record.help) {
        error_text("Lua ShellError detail", item)?;
    }
    if let Some(command) = &record.command {
        error_text("Lua ShellError command", command)?;
    }
    for label in &record.labels {
        check_label(label)?;
    }
    let total = record.text_bytes();
    if total > ERROR_TEXT_BYTES_MAX {
        return Err(limit_error(
            "Lua ShellError retained bytes",
            ERROR_TEXT_BYTES_MAX,
            total,
        ));
    }
    record
        .validate()
        .map_err(|e| abi_error(format!("invalid Lua ShellError: {}", e.message())))?;
    Ok(record.into())
}

/// One label of a script's error: terminal-safe text, a bounded source, and
/// a span on UTF-8 boundaries of it (the empty 0..0 span without a source).
fn check_label(label: &Label) -> Result<(), OpError> {
    error_text("Lua ShellError label message", &label.message)?;
    match &label.source {
        Some(source) => {
            if source.len() > LABEL_SOURCE_BYTES_MAX {
                return Err(limit_error(
                    "Lua ShellError label source bytes",
                    LABEL_SOURCE_BYTES_MAX,
                    source.len(),
                ));
            }
            if has_terminal_controls(source) {
                return Err(abi_error(
                    "Lua ShellError label source contains forbidden terminal control bytes",
                ));
            }
            let (s, e) = (label.start as usize, label.end as usize);
            if !(s <= e
                && e <= source.len()
                && source.is_char_boundary(s)
                && source.is_char_boundary(e))
            {
                return Err(abi_error(
                    "Lua ShellError label is not a valid UTF-8 byte range",
                ));
            }
        }
        None if label.start != 0 || label.end != 0 => {
            return Err(abi_error(
                "Lua ShellError label without source must use the empty 0..0 span",
            ));
        }
        None => {}
    }
    Ok(())
}

fn typed_output(output: &Json) -> Result<ExecutionOutput, OpError> {
    let object = output
        .as_object()
        .ok_or_else(|| abi_error("`output` must be a table"))?;
    let kind = object
        .get("kind")
        .and_then(Json::as_str)
        .ok_or_else(|| abi_error("`output` needs a string `kind`"))?;
    let only = |field: &str| object.keys().all(|k| k == "kind" || k == field);
    match kind {
        "value" if only("value") => {
            let value = object
                .get("value")
                .ok_or_else(|| abi_error("value output requires `value`"))?;
            Ok(ExecutionOutput::Value {
                value: structured(value)?,
            })
        }
        "values" if only("values") => {
            let items: &[Json] = match object.get("values") {
                Some(Json::Array(items)) => items,
                Some(Json::Object(map)) if map.is_empty() => &[],
                _ => return Err(abi_error("values output requires a `values` list")),
            };
            if items.len() > STREAM_VALUES_MAX {
                return Err(limit_error(
                    "Lua runner finite stream values",
                    STREAM_VALUES_MAX,
                    items.len(),
                ));
            }
            let values = items
                .iter()
                .map(structured)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ExecutionOutput::Values { values })
        }
        "inherited" | "bytes" => Err(abi_error(
            "Lua runner ABI v1 returns typed values, not inherited or byte output",
        )
        .with_help(
            "Return `output = { kind = 'value', value = ... }` or a bounded `values` batch",
        )),
        _ => Err(abi_error(format!("invalid `output` of kind `{kind}`"))),
    }
}

/// Decode an ABI v1 result envelope (already converted to JSON): an outcome,
/// or the structured error the script returned. With captured output
/// (`captured`) a successful result gives its status and no `output`: the
/// outcome's output is what the script wrote.
pub fn decode_result(
    value: &Json,
    source: &str,
    captured: Option<Captured>,
) -> Result<Json, OpError> {
    let invalid = |e: String| boundary_error(source, format!("invalid ABI v1 result: {e}"));
    let mut fields = Fields::of(value, "").map_err(invalid)?;
    let abi_version: u64 = fields.integer("abi_version").map_err(invalid)?;
    let ok = fields
        .value("ok")
        .and_then(Json::as_bool)
        .ok_or_else(|| invalid("field `ok` must be a boolean".to_owned()))?;
    let status: Option<i32> = fields.optional_integer("status").map_err(invalid)?;
    let output = fields.value("output");
    let error = fields.value("error");
    fields.finish().map_err(invalid)?;
    if abi_version != ABI_VERSION {
        return Err(unsupported_abi(abi_version));
    }
    if ok {
        if error.is_some() {
            return Err(abi_error(
                "successful Lua runner result must not contain `error`",
            ));
        }
        let status = status
            .ok_or_else(|| abi_error("successful Lua runner result requires integer `status`"))?;
        if let Some(captured) = captured {
            if output.is_some() {
                return Err(abi_error(
                    "a Lua runner result with captured output must not contain `output`",
                )
                .with_help(
                    "With output target `capture` the output is what the script writes (print, io.write); return only `status`",
                ));
            }
            return outcome_with(status, captured.output, captured.diagnostics);
        }
        let output = output
            .ok_or_else(|| abi_error("successful Lua runner result requires typed `output`"))?;
        outcome(status, typed_output(output)?)
    } else {
        if status.is_some() || output.is_some() {
            return Err(abi_error(
                "failed Lua runner result must contain only structured `error` data",
            ));
        }
        let error = error
            .ok_or_else(|| abi_error("failed Lua runner result requires structured `error`"))?;
        Err(script_error(error)?)
    }
}

/// Check that a v1 module table has only `abi_version` and `main`.
pub fn check_module_keys<'a>(
    keys: impl Iterator<Item = Option<&'a str>>,
    source: &str,
) -> Result<(), OpError> {
    for key in keys {
        let key = key.ok_or_else(|| {
            boundary_error(source, "Lua runner ABI v1 module keys must be strings")
        })?;
        if key.len() > MODULE_FIELD_BYTES_MAX {
            return Err(limit_error(
                "Lua runner module field name bytes",
                MODULE_FIELD_BYTES_MAX,
                key.len(),
            ));
        }
        if key != "abi_version" && key != "main" {
            return Err(boundary_error(
                source,
                format!("unknown Lua runner module field `{key}`"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_v1_value_result_becomes_a_sorted_outcome() {
        let result = json!({"abi_version": 1, "ok": true, "status": 0,
            "output": {"kind": "value", "value": {"type": "int", "value": 42}}});
        let outcome = decode_result(&result, "s", None).unwrap();
        assert_eq!(
            serde_json::to_string(&outcome).unwrap(),
            r#"{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"int","value":42}},"status":{"code":0,"kind":"exited"}}"#
        );
    }

    #[test]
    fn mixed_or_incomplete_envelopes_fail() {
        for result in [
            json!({"abi_version": 1, "ok": true, "output": {"kind": "value", "value": {"type": "nothing"}}}),
            json!({"abi_version": 1, "ok": true, "status": 0}),
            json!({"abi_version": 1, "ok": false, "status": 0}),
            json!({"abi_version": 2, "ok": true, "status": 0, "output": {"kind": "values", "values": {}}}),
            json!({"abi_version": 1, "ok": true, "status": 0, "output": {"kind": "bytes"}}),
            json!({"abi_version": 1, "ok": true, "status": 0, "extra": 1, "output": {"kind": "values", "values": {}}}),
        ] {
            assert!(decode_result(&result, "s", None).is_err(), "{result}");
        }
    }

    #[test]
    fn a_failed_result_returns_the_scripts_error() {
        let result = json!({"abi_version": 1, "ok": false,
            "error": {"code": "invalid_argument", "message": "no", "context": ["c"]}});
        let error = decode_result(&result, "s", None).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert_eq!(error.context, vec!["c".to_owned()]);
        let bad = json!({"abi_version": 1, "ok": false,
            "error": {"code": "lua", "message": "\u{1b}[2J"}});
        assert_eq!(
            decode_result(&bad, "s", None).unwrap_err().code,
            ErrorCode::Validation
        );
    }

    #[test]
    fn legacy_results_keep_integers_and_status() {
        let outcome = legacy_outcome(&json!({"status": 3, "x": 1.5}), None).unwrap();
        assert_eq!(outcome["status"]["code"], 3);
        assert_eq!(
            outcome["output"]["value"]["value"]["x"],
            json!({"type": "decimal", "value": "1.5"})
        );
    }

    #[test]
    fn context_validation_follows_the_abi() {
        let mut context = ExecutionContext {
            arguments: vec!["a".to_owned()],
            environment: [("A".to_owned(), "b".to_owned())].into(),
            working_directory: "/".to_owned(),
            input: quirl_lua_protocol::records::ExecutionInput::None,
            output: OutputTarget::Value,
            declared_effects: ExecutionEffects {
                spawn_process: true,
                ..ExecutionEffects::default()
            },
        };
        check_context(&context, false).unwrap();
        assert_eq!(
            effect_names(context.declared_effects),
            vec!["spawn_process"]
        );
        context.output = OutputTarget::Capture {
            max_bytes_per_stream: 1,
        };
        assert_eq!(
            check_context(&context, false).unwrap_err().code,
            ErrorCode::Validation
        );
        context.output = OutputTarget::Value;
        context.working_directory = String::new();
        assert!(check_context(&context, false).is_err());
    }

    #[test]
    fn outcomes_are_the_protocols_records() {
        let result = json!({"abi_version": 1, "ok": true, "status": 0,
            "output": {"kind": "values", "values": [
                {"type": "record", "value": {"b": {"type": "size", "value": {"bytes": 1}},
                                             "a": {"type": "list", "value": {}}}},
                {"type": "nothing"}, {"type": "u_int", "value": 3},
                {"type": "duration", "value": {"nanoseconds": 5}}]}});
        let outcome = decode_result(&result, "s", None).unwrap();
        assert_eq!(
            serde_json::to_string(&outcome).unwrap(),
            r#"{"cleanup":"complete","diagnostics":[],"output":{"kind":"values","values":[{"type":"record","value":{"a":{"type":"list","value":[]},"b":{"type":"size","value":{"bytes":1}}}},{"type":"nothing"},{"type":"u_int","value":3},{"type":"duration","value":{"nanoseconds":5}}]},"status":{"code":0,"kind":"exited"}}"#
        );
        let decoded = quirl_lua_protocol::records::OperationResult::decode(
            quirl_lua_protocol::records::OperationKind::Run,
            &outcome,
        )
        .unwrap();
        assert_eq!(decoded.to_value().unwrap(), outcome);
    }
}
