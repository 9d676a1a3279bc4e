//! Typed operation results.
//!
//! A response's `result` travels as a free-form value. Quirl builds it by
//! converting the typed result to a `serde_json::Value`, so its canonical
//! form has object keys sorted at every level. [`OperationResult`] gives
//! each operation its typed result, so a parent can re-validate what a
//! worker returned for the request in flight.

use super::{
    EventHandlerReport, ExecutionOutcome, OperationKind, PluginRegistrations, QuirlConfig,
};
use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Decode, decode_document};
use crate::value::{CanonicalValue, encode_value};
use serde::Serialize;
use serde_json::Value;

/// The typed result of one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationResult {
    /// `initialize` and `check`: always `null`.
    Null,
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

fn typed<T: Decode>(result: &Value) -> Result<T, ProtocolError> {
    decode_document::<T>(&encode_value(result))
}

impl OperationResult {
    /// Decode and validate the `result` of a response to an operation of `kind`.
    pub fn decode(kind: OperationKind, result: &Value) -> Result<Self, ProtocolError> {
        let decoded = match kind {
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
                Ok(OperationResult::Value(result.clone()))
            }
            OperationKind::LoadConfig => typed(result).map(OperationResult::Config),
            OperationKind::LoadPlugin => typed(result).map(OperationResult::Plugin),
            OperationKind::RenderPrompt => typed(result).map(OperationResult::Prompt),
            OperationKind::Run | OperationKind::PluginCommand => {
                typed(result).map(OperationResult::Outcome)
            }
            OperationKind::Event => typed(result).map(OperationResult::Reports),
            OperationKind::Test => typed(result).map(OperationResult::TestCount),
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
            ) | (OperationResult::Config(_), OperationKind::LoadConfig)
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
            OperationResult::Config(config) => convert(config),
            OperationResult::Plugin(plugin) => convert(plugin),
            OperationResult::Prompt(prompt) => convert(prompt),
            OperationResult::Outcome(outcome) => convert(outcome),
            OperationResult::Reports(reports) => convert(reports),
            OperationResult::TestCount(count) => Ok(Value::from(*count)),
        }
    }
}
