//! Quirl's Lua runner ABI v1 (ADR 0018): the execution context handed to
//! `main` (and to plugin command callbacks), the typed result envelope they
//! return, and the migration of unversioned (v0) results.
//!
//! The result of `run` and `plugin_command` is an execution outcome, written
//! as Quirl writes it (keys sorted):
//! `{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"int","value":42}},"status":{"code":0,"kind":"exited"}}`.

use crate::error::{ErrorCode, Label, OpError, has_terminal_controls};
use serde::Deserialize;
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeMap;

/// Current runner ABI version.
pub const ABI_VERSION: u64 = 1;
/// Arguments per invocation.
pub const ARGUMENTS_MAX: usize = 1_024;
/// Bytes across arguments.
pub const ARGUMENT_BYTES_MAX: usize = 1024 * 1024;
/// Environment entries.
pub const ENVIRONMENT_ENTRIES_MAX: usize = 256;
/// Bytes across environment names and values.
pub const ENVIRONMENT_BYTES_MAX: usize = 64 * 1024;
/// Bytes in the working directory.
pub const CWD_BYTES_MAX: usize = 4 * 1024;
/// Input bytes.
pub const INPUT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Structured value nodes.
pub const VALUE_NODES_MAX: usize = 100_000;
/// Structured value depth.
pub const VALUE_DEPTH_MAX: usize = 64;
/// Structured value text bytes.
pub const VALUE_TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Values in a finite `values` output.
pub const STREAM_VALUES_MAX: usize = 512;
const ERROR_ITEMS_MAX: usize = 32;
const ERROR_FIELD_BYTES_MAX: usize = 16 * 1024;
const ERROR_SOURCE_BYTES_MAX: usize = 64 * 1024;
const ERROR_TOTAL_BYTES_MAX: usize = 256 * 1024;
const MODULE_FIELD_BYTES_MAX: usize = 128;

/// Effects declared for an execution.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Effects {
    pub read_filesystem: bool,
    pub write_filesystem: bool,
    pub spawn_process: bool,
    pub change_directory: bool,
}

impl Effects {
    /// Declared effect names in Quirl's order.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.read_filesystem, "read_filesystem"),
            (self.write_filesystem, "write_filesystem"),
            (self.spawn_process, "spawn_process"),
            (self.change_directory, "change_directory"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// The execution context of `run` and `plugin_command` (the wire record's
/// fields). `input` and `output` stay JSON: they reach Lua in exactly their
/// wire shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunContext {
    /// Arguments in source order.
    pub arguments: Vec<String>,
    /// Environment snapshot.
    pub environment: BTreeMap<String, String>,
    /// Working directory.
    pub working_directory: String,
    /// `ExecutionInput`: `{"kind":"none"}`, `{"kind":"bytes","content":[…]}`
    /// or `{"kind":"value","content":<structured value>}`.
    pub input: Json,
    /// `ExecutionOutputTarget`; the runner ABI accepts only `{"kind":"value"}`.
    pub output: Json,
    /// Declared effects.
    pub declared_effects: Effects,
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

impl RunContext {
    /// Read and validate the wire record.
    pub fn from_json(value: &Json) -> Result<Self, OpError> {
        let context: Self = serde_json::from_value(value.clone())
            .map_err(|e| abi_error(format!("invalid execution context: {e}")))?;
        context.validate()?;
        Ok(context)
    }

    /// Quirl's `LuaRunnerContext::validate`.
    pub fn validate(&self) -> Result<(), OpError> {
        if self.arguments.len() > ARGUMENTS_MAX {
            return Err(limit_error(
                "Lua runner arguments",
                ARGUMENTS_MAX,
                self.arguments.len(),
            ));
        }
        let bytes: usize = self.arguments.iter().map(String::len).sum();
        if bytes > ARGUMENT_BYTES_MAX {
            return Err(limit_error(
                "Lua runner argument bytes",
                ARGUMENT_BYTES_MAX,
                bytes,
            ));
        }
        if self.environment.len() > ENVIRONMENT_ENTRIES_MAX {
            return Err(limit_error(
                "Lua runner environment entries",
                ENVIRONMENT_ENTRIES_MAX,
                self.environment.len(),
            ));
        }
        let bytes: usize = self
            .environment
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if bytes > ENVIRONMENT_BYTES_MAX {
            return Err(limit_error(
                "Lua runner environment bytes",
                ENVIRONMENT_BYTES_MAX,
                bytes,
            ));
        }
        for (key, value) in &self.environment {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(abi_error(
                    "Lua runner environment names must be non-empty and contain neither `=` nor NUL",
                ));
            }
            if value.contains('\0') {
                return Err(abi_error(
                    "Lua runner environment values must not contain NUL",
                ));
            }
        }
        if self.working_directory.len() > CWD_BYTES_MAX {
            return Err(limit_error(
                "Lua runner working directory",
                CWD_BYTES_MAX,
                self.working_directory.len(),
            ));
        }
        if self.working_directory.is_empty() {
            return Err(abi_error("Lua runner working directory must not be empty"));
        }
        validate_input(&self.input)?;
        match self.output.get("kind").and_then(Json::as_str) {
            Some("value") if self.output.as_object().is_some_and(|o| o.len() == 1) => Ok(()),
            Some("inherit" | "capture") => Err(abi_error(
                "Lua runner ABI v1 supports typed value output only",
            )
            .with_help("Select value output or use a byte-oriented execution adapter")),
            _ => Err(abi_error("invalid execution output target")),
        }
    }
}

fn validate_input(input: &Json) -> Result<(), OpError> {
    let object = input
        .as_object()
        .ok_or_else(|| abi_error("execution input must be an object"))?;
    match (object.get("kind").and_then(Json::as_str), object.len()) {
        (Some("none"), 1) => Ok(()),
        (Some("bytes"), 2) => {
            let bytes = object
                .get("content")
                .and_then(Json::as_array)
                .ok_or_else(|| abi_error("byte input requires a `content` array"))?;
            if bytes.len() > INPUT_BYTES_MAX {
                return Err(limit_error(
                    "Lua runner input bytes",
                    INPUT_BYTES_MAX,
                    bytes.len(),
                ));
            }
            if !bytes.iter().all(|b| b.as_u64().is_some_and(|b| b <= 255)) {
                return Err(abi_error("byte input must contain integers 0..=255"));
            }
            Ok(())
        }
        (Some("value"), 2) => {
            let value = object
                .get("content")
                .ok_or_else(|| abi_error("value input requires `content`"))?;
            structured(value).map(drop)
        }
        _ => Err(abi_error("invalid execution input")),
    }
}

struct ValueWalk {
    nodes: usize,
    text: usize,
}

impl ValueWalk {
    fn text(&mut self, bytes: usize) -> Result<(), OpError> {
        self.text = self.text.saturating_add(bytes);
        if self.text > VALUE_TEXT_BYTES_MAX {
            return Err(limit_error(
                "structured value text bytes",
                VALUE_TEXT_BYTES_MAX,
                self.text,
            ));
        }
        Ok(())
    }

    fn value(&mut self, value: &Json, depth: usize) -> Result<Json, OpError> {
        self.nodes += 1;
        if self.nodes > VALUE_NODES_MAX {
            return Err(limit_error(
                "structured value nodes",
                VALUE_NODES_MAX,
                self.nodes,
            ));
        }
        if depth > VALUE_DEPTH_MAX {
            return Err(limit_error(
                "structured value depth",
                VALUE_DEPTH_MAX,
                depth,
            ));
        }
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
        let need = |what: &str| abi_error(format!("a `{kind}` value needs {what}"));
        let normalized = match kind {
            "nothing" => {
                if content.is_some_and(|c| !c.is_null()) {
                    return Err(abi_error("a `nothing` value has no content"));
                }
                return Ok(json!({"type": "nothing"}));
            }
            "bool" => Json::Bool(
                content
                    .and_then(Json::as_bool)
                    .ok_or_else(|| need("a boolean"))?,
            ),
            "int" => Json::from(
                content
                    .and_then(Json::as_i64)
                    .ok_or_else(|| need("an integer"))?,
            ),
            "u_int" => Json::from(
                content
                    .and_then(Json::as_u64)
                    .ok_or_else(|| need("a non-negative integer"))?,
            ),
            "decimal" | "string" | "path" | "date_time" | "pattern" => {
                let text = content
                    .and_then(Json::as_str)
                    .ok_or_else(|| need("a string"))?;
                self.text(text.len())?;
                Json::String(text.to_owned())
            }
            "list" => {
                let items: &[Json] = match content {
                    Some(Json::Array(items)) => items,
                    Some(Json::Object(map)) if map.is_empty() => &[],
                    _ => return Err(need("a list")),
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.value(item, depth + 1)?);
                }
                Json::Array(out)
            }
            "record" => {
                let map = content
                    .and_then(Json::as_object)
                    .ok_or_else(|| need("a record"))?;
                let mut out = Map::new();
                for (key, item) in map {
                    self.text(key.len())?;
                    out.insert(key.clone(), self.value(item, depth + 1)?);
                }
                Json::Object(out)
            }
            "duration" | "size" => {
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
                    .ok_or_else(|| need(&format!("`{{{field} = <unsigned integer>}}`")))?;
                json!({ field: inner })
            }
            other => {
                return Err(abi_error(format!(
                    "unknown structured value type `{other}`"
                )));
            }
        };
        let mut out = Map::new();
        out.insert("type".to_owned(), Json::from(kind));
        out.insert("value".to_owned(), normalized);
        Ok(Json::Object(out))
    }
}

/// Validate a structured value (`{type, value}`) within the shared bounds
/// and return it normalized (an empty list written `[]`).
pub fn structured(value: &Json) -> Result<Json, OpError> {
    ValueWalk { nodes: 0, text: 0 }.value(value, 0)
}

/// Quirl's `StructuredValue::from_json` for unversioned results: plain JSON
/// becomes tagged values (integers stay `int`/`uint`, other numbers become
/// `decimal` text).
pub fn structured_from_plain(value: &Json) -> Json {
    match value {
        Json::Null => json!({"type": "nothing"}),
        Json::Bool(b) => json!({"type": "bool", "value": b}),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => json!({"type": "int", "value": i}),
            (_, Some(u)) => json!({"type": "u_int", "value": u}),
            _ => json!({"type": "decimal", "value": n.to_string()}),
        },
        Json::String(s) => json!({"type": "string", "value": s}),
        Json::Array(items) => {
            json!({"type": "list", "value": items.iter().map(structured_from_plain).collect::<Vec<_>>()})
        }
        Json::Object(map) => {
            let record: Map<String, Json> = map
                .iter()
                .map(|(k, v)| (k.clone(), structured_from_plain(v)))
                .collect();
            json!({"type": "record", "value": record})
        }
    }
}

/// A successful outcome with `output` and exit status `status`.
pub fn outcome(status: i32, output: Json) -> Json {
    json!({
        "cleanup": "complete",
        "diagnostics": [],
        "output": output,
        "status": {"code": status, "kind": "exited"},
    })
}

/// The v0 migration: any JSON-compatible value, with an optional integer
/// `status` field.
pub fn legacy_outcome(value: &Json) -> Result<Json, OpError> {
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
    let value = structured(&structured_from_plain(value))?;
    Ok(outcome(status, json!({"kind": "value", "value": value})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultWire {
    abi_version: u64,
    ok: bool,
    #[serde(default)]
    status: Option<i32>,
    #[serde(default)]
    output: Option<Json>,
    #[serde(default)]
    error: Option<ErrorWire>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorWire {
    code: String,
    message: String,
    #[serde(default)]
    labels: Vec<LabelWire>,
    #[serde(default)]
    context: Vec<String>,
    #[serde(default)]
    help: Vec<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    exit_status: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelWire {
    #[serde(default)]
    source: Option<String>,
    start: u64,
    end: u64,
    message: String,
}

fn error_text(what: &str, value: &str) -> Result<(), OpError> {
    if value.len() > ERROR_FIELD_BYTES_MAX {
        return Err(limit_error(what, ERROR_FIELD_BYTES_MAX, value.len()));
    }
    if has_terminal_controls(value) {
        return Err(abi_error(format!(
            "{what} contains forbidden terminal control bytes"
        )));
    }
    Ok(())
}

impl ErrorWire {
    fn into_error(self) -> Result<OpError, OpError> {
        let code = ErrorCode::from_name(&self.code)
            .ok_or_else(|| abi_error(format!("unknown error code `{}`", self.code)))?;
        error_text("Lua ShellError message", &self.message)?;
        for (what, count) in [
            ("labels", self.labels.len()),
            ("context", self.context.len()),
            ("help", self.help.len()),
        ] {
            if count > ERROR_ITEMS_MAX {
                return Err(limit_error(
                    &format!("Lua ShellError {what}"),
                    ERROR_ITEMS_MAX,
                    count,
                ));
            }
        }
        let mut total = self.message.len();
        for item in self.context.iter().chain(&self.help) {
            error_text("Lua ShellError detail", item)?;
            total += item.len();
        }
        if let Some(command) = &self.command {
            error_text("Lua ShellError command", command)?;
            total += command.len();
        }
        let mut labels = Vec::with_capacity(self.labels.len());
        for label in self.labels {
            error_text("Lua ShellError label message", &label.message)?;
            total += label.message.len();
            let (start, end) = (
                u32::try_from(label.start).map_err(|_| abi_error("label start is outside u32"))?,
                u32::try_from(label.end).map_err(|_| abi_error("label end is outside u32"))?,
            );
            match &label.source {
                Some(source) => {
                    if source.len() > ERROR_SOURCE_BYTES_MAX {
                        return Err(limit_error(
                            "Lua ShellError label source bytes",
                            ERROR_SOURCE_BYTES_MAX,
                            source.len(),
                        ));
                    }
                    if has_terminal_controls(source) {
                        return Err(abi_error(
                            "Lua ShellError label source contains forbidden terminal control bytes",
                        ));
                    }
                    let (s, e) = (start as usize, end as usize);
                    if !(s <= e
                        && e <= source.len()
                        && source.is_char_boundary(s)
                        && source.is_char_boundary(e))
                    {
                        return Err(abi_error(
                            "Lua ShellError label is not a valid UTF-8 byte range",
                        ));
                    }
                    total += source.len();
                }
                None if start != 0 || end != 0 => {
                    return Err(abi_error(
                        "Lua ShellError label without source must use the empty 0..0 span",
                    ));
                }
                None => {}
            }
            labels.push(Label {
                source: label.source,
                start,
                end,
                message: label.message,
            });
        }
        if total > ERROR_TOTAL_BYTES_MAX {
            return Err(limit_error(
                "Lua ShellError retained bytes",
                ERROR_TOTAL_BYTES_MAX,
                total,
            ));
        }
        Ok(crate::error::ErrorRecord {
            code,
            message: self.message,
            labels,
            context: self.context,
            help: self.help,
            command: self.command,
            exit_status: self.exit_status,
        }
        .into())
    }
}

fn typed_output(output: &Json) -> Result<Json, OpError> {
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
            Ok(json!({"kind": "value", "value": structured(value)?}))
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
            Ok(json!({"kind": "values", "values": values}))
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
/// or the structured error the script returned.
pub fn decode_result(value: &Json, source: &str) -> Result<Json, OpError> {
    let wire: ResultWire = crate::lenient::from_json(value)
        .map_err(|e| boundary_error(source, format!("invalid ABI v1 result: {e}")))?;
    if wire.abi_version != ABI_VERSION {
        return Err(unsupported_abi(wire.abi_version));
    }
    if wire.ok {
        if wire.error.is_some() {
            return Err(abi_error(
                "successful Lua runner result must not contain `error`",
            ));
        }
        let status = wire
            .status
            .ok_or_else(|| abi_error("successful Lua runner result requires integer `status`"))?;
        let output = wire
            .output
            .ok_or_else(|| abi_error("successful Lua runner result requires typed `output`"))?;
        Ok(outcome(status, typed_output(&output)?))
    } else {
        if wire.status.is_some() || wire.output.is_some() {
            return Err(abi_error(
                "failed Lua runner result must contain only structured `error` data",
            ));
        }
        let error = wire
            .error
            .ok_or_else(|| abi_error("failed Lua runner result requires structured `error`"))?;
        Err(error.into_error()?)
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

    #[test]
    fn a_v1_value_result_becomes_a_sorted_outcome() {
        let result = json!({"abi_version": 1, "ok": true, "status": 0,
            "output": {"kind": "value", "value": {"type": "int", "value": 42}}});
        let outcome = decode_result(&result, "s").unwrap();
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
            assert!(decode_result(&result, "s").is_err(), "{result}");
        }
    }

    #[test]
    fn a_failed_result_returns_the_scripts_error() {
        let result = json!({"abi_version": 1, "ok": false,
            "error": {"code": "invalid_argument", "message": "no", "context": ["c"]}});
        let error = decode_result(&result, "s").unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert_eq!(error.context, vec!["c".to_owned()]);
        let bad = json!({"abi_version": 1, "ok": false,
            "error": {"code": "lua", "message": "\u{1b}[2J"}});
        assert_eq!(
            decode_result(&bad, "s").unwrap_err().code,
            ErrorCode::Validation
        );
    }

    #[test]
    fn legacy_results_keep_integers_and_status() {
        let outcome = legacy_outcome(&json!({"status": 3, "x": 1.5})).unwrap();
        assert_eq!(outcome["status"]["code"], 3);
        assert_eq!(
            outcome["output"]["value"]["value"]["x"],
            json!({"type": "decimal", "value": "1.5"})
        );
    }

    #[test]
    fn context_validation_follows_the_abi() {
        let mut context = json!({
            "arguments": ["a"], "environment": {"A": "b"}, "working_directory": "/",
            "input": {"kind": "none"}, "output": {"kind": "value"},
            "declared_effects": {"read_filesystem": false, "write_filesystem": false,
                                 "spawn_process": true, "change_directory": false}
        });
        let parsed = RunContext::from_json(&context).unwrap();
        assert_eq!(parsed.declared_effects.names(), vec!["spawn_process"]);
        context["output"] = json!({"kind": "capture", "max_bytes_per_stream": 1});
        assert!(RunContext::from_json(&context).is_err());
        context["output"] = json!({"kind": "value"});
        context["working_directory"] = json!("");
        assert!(RunContext::from_json(&context).is_err());
    }
}
