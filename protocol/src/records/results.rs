//! Typed operation results.
//!
//! A response's `result` travels as a free-form value. Quirl builds it by
//! converting the typed result to a `serde_json::Value`, so its canonical
//! form has object keys sorted at every level. [`OperationResult`] gives
//! each operation its typed result, so a parent can re-validate what a
//! worker returned for the request in flight.
//!
//! Decoding also repeats the domain rules Quirl's worker runtime applies
//! before it answers, so a result Quirl could never have sent is refused
//! (`domain_bounds`, or the schema sub-kind a mis-shaped completion item
//! calls for): completion items (shape, at most [`COMPLETION_ITEMS_MAX`],
//! [`COMPLETION_ITEM_BYTES_MAX`] each and [`COMPLETION_RESULT_BYTES_MAX`]
//! together), contribution values (terminal-safe, annotation bounds),
//! rendered prompts (at most [`PROMPT_RETURN_BYTES_MAX`], terminal-safe),
//! test counts (at least 1), plugin registrations (at least one), and
//! handler reports (at most [`EVENT_HANDLERS_MAX`], in strictly ascending
//! handler name order; see [`EventHandlerReport`] for each report).

use super::{
    CheckReport, EventHandlerReport, ExecutionOutcome, OperationKind, PluginRegistrations,
    QuirlConfig,
};
use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Decode, Mode, decode_document_in};
use crate::limits::{
    COMPLETION_ITEM_BYTES_MAX, COMPLETION_ITEMS_MAX, COMPLETION_RESULT_BYTES_MAX,
    EVENT_HANDLERS_MAX, PROMPT_RETURN_BYTES_MAX,
};
use crate::value::{CanonicalValue, check_terminal_safe, encode_value, has_terminal_controls};
use serde::Serialize;
use serde_json::Value;

/// The typed result of one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationResult {
    /// `initialize`, and `check` without the report capability: `null`.
    Null,
    /// `check` when `initialize` granted
    /// [`CHECK_DIAGNOSTICS_GRANT`](super::CHECK_DIAGNOSTICS_GRANT): the
    /// findings (SPEC §7.2; the session refuses a report without the grant).
    CheckReport(CheckReport),
    /// `eval`, `complete`, `contribution`: a free-form value.
    Value(Value),
    /// `load_config`.
    Config(QuirlConfig),
    /// `load_plugin`.
    Plugin(PluginRegistrations),
    /// `render_prompt`: the rendered text, or `null`.
    Prompt(Option<String>),
    /// `run` and `plugin_command`.
    Outcome(ExecutionOutcome),
    /// `event`: one report per handler.
    Reports(Vec<EventHandlerReport>),
    /// `test`: the number of tests run.
    TestCount(u64),
}

fn typed<T: Decode>(result: &Value, mode: Mode) -> Result<T, ProtocolError> {
    decode_document_in::<T>(&encode_value(result), mode)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The domain rules of the free-form results (`complete`, `contribution`;
/// `eval` has none), checked without copying the value.
pub(crate) fn check_free_form(kind: OperationKind, value: &Value) -> Result<(), ProtocolError> {
    match kind {
        OperationKind::Complete => check_completion(value),
        OperationKind::Contribution => check_terminal_safe(value),
        _ => Ok(()),
    }
}

/// The strings of one completion item (keys not counted), or why it is not one.
fn completion_item_bytes(item: &Value) -> Result<usize, ProtocolError> {
    const RECORD: &str = "completion item";
    match item {
        Value::String(text) => Ok(text.len()),
        Value::Object(map) => {
            let mut bytes = 0_usize;
            for (key, member) in map {
                if !matches!(key.as_str(), "value" | "display" | "summary" | "detail") {
                    return Err(ProtocolError::unknown_field(key, RECORD));
                }
                let Value::String(text) = member else {
                    return Err(ProtocolError::wrong_type("a string", json_type(member)).at(key));
                };
                bytes = bytes.saturating_add(text.len());
            }
            if !map.contains_key("value") {
                return Err(ProtocolError::missing_field("value", RECORD));
            }
            Ok(bytes)
        }
        other => Err(ProtocolError::wrong_type(
            "a string or an object with a string `value`",
            json_type(other),
        )),
    }
}

/// Quirl's `validate_completion_result`.
fn check_completion(value: &Value) -> Result<(), ProtocolError> {
    let Value::Array(items) = value else {
        return Err(ProtocolError::wrong_type(
            "an array of completion items",
            json_type(value),
        ));
    };
    if items.len() > COMPLETION_ITEMS_MAX {
        return Err(ProtocolError::domain(format!(
            "{} completion items; at most {COMPLETION_ITEMS_MAX} are allowed",
            items.len()
        )));
    }
    let mut total = 0_usize;
    for (index, item) in items.iter().enumerate() {
        let bytes = completion_item_bytes(item).map_err(|e| e.at_index(index))?;
        if bytes > COMPLETION_ITEM_BYTES_MAX {
            return Err(ProtocolError::domain(format!(
                "completion item holds {bytes} bytes of text; at most {COMPLETION_ITEM_BYTES_MAX} are allowed"
            ))
            .at_index(index));
        }
        total = total.saturating_add(bytes);
        if total > COMPLETION_RESULT_BYTES_MAX {
            return Err(ProtocolError::domain(format!(
                "completion items hold more than {COMPLETION_RESULT_BYTES_MAX} bytes of text together"
            ))
            .at_index(index));
        }
    }
    Ok(())
}

/// Quirl's prompt segment conversion: bounded, terminal-safe text.
fn check_prompt(prompt: Option<&str>) -> Result<(), ProtocolError> {
    let Some(text) = prompt else {
        return Ok(());
    };
    if text.len() > PROMPT_RETURN_BYTES_MAX {
        return Err(ProtocolError::domain(format!(
            "rendered prompt has {} bytes; at most {PROMPT_RETURN_BYTES_MAX} are allowed",
            text.len()
        )));
    }
    if has_terminal_controls(text) {
        return Err(ProtocolError::domain(
            "rendered prompt contains terminal control characters",
        ));
    }
    Ok(())
}

fn check_test_count(count: u64) -> Result<(), ProtocolError> {
    if count == 0 {
        return Err(ProtocolError::domain(
            "a test run counts at least one test (a module without tests is an error)",
        ));
    }
    Ok(())
}

fn check_plugin(plugin: &PluginRegistrations) -> Result<(), ProtocolError> {
    if plugin.prompt_segments.is_empty()
        && plugin.completion_providers.is_empty()
        && plugin.commands.is_empty()
        && plugin.events.is_empty()
        && plugin.contributions.is_empty()
    {
        return Err(ProtocolError::domain(
            "a loaded plugin registers at least one command, prompt segment, completion provider, event handler or contribution",
        ));
    }
    Ok(())
}

/// One report per handler, in handler name order (names are unique).
fn check_reports(reports: &[EventHandlerReport]) -> Result<(), ProtocolError> {
    if reports.len() > EVENT_HANDLERS_MAX {
        return Err(ProtocolError::domain(format!(
            "{} handler reports; a plugin has at most {EVENT_HANDLERS_MAX} event handlers",
            reports.len()
        )));
    }
    for (index, pair) in reports.windows(2).enumerate() {
        if pair[0].handler >= pair[1].handler {
            return Err(ProtocolError::domain(format!(
                "handler report `{}` follows `{}`: reports come once per handler, in ascending name order",
                pair[1].handler, pair[0].handler
            ))
            .at_index(index + 1));
        }
    }
    Ok(())
}

impl OperationResult {
    /// Decode and validate the `result` of a response to an operation of
    /// `kind` by the wire's rules (SPEC §7.2).
    pub fn decode(kind: OperationKind, result: &Value) -> Result<Self, ProtocolError> {
        Self::decode_in(kind, result, Mode::Wire)
    }

    /// [`decode`](Self::decode) under `mode` (a host's own JSON fills in
    /// omitted lists and options, see `StrictDecode`).
    pub(crate) fn decode_in(
        kind: OperationKind,
        result: &Value,
        mode: Mode,
    ) -> Result<Self, ProtocolError> {
        let decoded = match kind {
            // A report is an object; any other non-null value stays
            // `wrong_type`, as for a `check` answered before reports existed.
            OperationKind::Check if result.is_object() => {
                typed(result, mode).map(OperationResult::CheckReport)
            }
            OperationKind::Initialize | OperationKind::Check => {
                if result.is_null() {
                    Ok(OperationResult::Null)
                } else {
                    Err(ProtocolError::new(
                        ErrorKind::WrongType,
                        format!("the result of {} must be null", kind.as_str()),
                    ))
                }
            }
            OperationKind::Eval | OperationKind::Complete | OperationKind::Contribution => {
                check_free_form(kind, result).map(|()| OperationResult::Value(result.clone()))
            }
            OperationKind::LoadConfig => typed(result, mode).map(OperationResult::Config),
            OperationKind::LoadPlugin => typed(result, mode)
                .and_then(|plugin| check_plugin(&plugin).map(|()| OperationResult::Plugin(plugin))),
            OperationKind::RenderPrompt => {
                typed::<Option<String>>(result, mode).and_then(|prompt| {
                    check_prompt(prompt.as_deref()).map(|()| OperationResult::Prompt(prompt))
                })
            }
            OperationKind::Run | OperationKind::PluginCommand => {
                typed(result, mode).map(OperationResult::Outcome)
            }
            OperationKind::Event => {
                typed::<Vec<EventHandlerReport>>(result, mode).and_then(|reports| {
                    check_reports(&reports).map(|()| OperationResult::Reports(reports))
                })
            }
            OperationKind::Test => typed(result, mode).and_then(|count| {
                check_test_count(count).map(|()| OperationResult::TestCount(count))
            }),
        };
        decoded.map_err(|e| e.at("result"))
    }

    /// Whether this result has the shape of operation `kind`'s result.
    pub fn fits(&self, kind: OperationKind) -> bool {
        matches!(
            (self, kind),
            (
                OperationResult::Null,
                OperationKind::Initialize | OperationKind::Check
            ) | (
                OperationResult::Value(_),
                OperationKind::Eval | OperationKind::Complete | OperationKind::Contribution
            ) | (OperationResult::CheckReport(_), OperationKind::Check)
                | (OperationResult::Config(_), OperationKind::LoadConfig)
                | (OperationResult::Plugin(_), OperationKind::LoadPlugin)
                | (OperationResult::Prompt(_), OperationKind::RenderPrompt)
                | (
                    OperationResult::Outcome(_),
                    OperationKind::Run | OperationKind::PluginCommand
                )
                | (OperationResult::Reports(_), OperationKind::Event)
                | (OperationResult::TestCount(_), OperationKind::Test)
        )
    }

    /// The free-form value this result travels as (canonical: keys sorted).
    pub fn to_value(&self) -> Result<Value, ProtocolError> {
        fn convert<T: Serialize>(value: &T) -> Result<Value, ProtocolError> {
            serde_json::to_value(value).map_err(|error| {
                ProtocolError::domain(format!("result cannot be represented: {error}"))
            })
        }
        match self {
            OperationResult::Null => Ok(Value::Null),
            OperationResult::Value(value) => convert(&CanonicalValue(value)),
            OperationResult::CheckReport(report) => convert(report),
            OperationResult::Config(config) => convert(config),
            OperationResult::Plugin(plugin) => convert(plugin),
            OperationResult::Prompt(prompt) => convert(prompt),
            OperationResult::Outcome(outcome) => convert(outcome),
            OperationResult::Reports(reports) => convert(reports),
            OperationResult::TestCount(count) => Ok(Value::from(*count)),
        }
    }
}
