//! What a handler answers to an event (SPEC §7.2, `event` result): the
//! actions it requests, with the data rules the codec checks, and the
//! per-handler report carrying them.

use super::registration_bounds::{bounded_text, portable_name};
use crate::error::ProtocolError;
use crate::json::{Validate, decode_record, decode_tagged};
use crate::limits::{EVENT_ACTIONS_MAX, REGISTRATION_NAME_BYTES_MAX};
use crate::records::ShellError;
use crate::value::{check_terminal_safe, has_terminal_controls};
use serde::Serialize;
use serde_json::Value;

/// An action requested by an event handler, tagged by `action`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ExtensionAction {
    /// Attach a diagnostic.
    Diagnose {
        /// Text.
        message: String,
    },
    /// Replace the pending command plan.
    RewritePlan {
        /// The new command source.
        source: String,
    },
    /// Set an environment entry on the pending plan.
    SetEnvironment {
        /// Name.
        name: String,
        /// Value.
        value: String,
    },
    /// Block the pending execution.
    BlockExecution {
        /// Why.
        reason: String,
    },
    /// Annotate the result with a free-form value (bounded: nodes, depth, text).
    AnnotateResult {
        /// Annotation key.
        key: String,
        /// Free-form value.
        #[serde(serialize_with = "crate::value::serialize_canonical")]
        value: Value,
    },
}

decode_tagged!(ExtensionAction "extension action", tag = "action" {
    "diagnose" => Diagnose { message: req },
    "rewrite_plan" => RewritePlan { source: req },
    "set_environment" => SetEnvironment { name: req, value: req },
    "block_execution" => BlockExecution { reason: req },
    "annotate_result" => AnnotateResult { key: req, value: req },
});

fn terminal_safe(field: &str, text: &str) -> Result<(), ProtocolError> {
    if has_terminal_controls(text) {
        return Err(ProtocolError::domain(format!(
            "`{field}` contains terminal control characters"
        ))
        .at(field));
    }
    Ok(())
}

impl ExtensionAction {
    /// The data rules of Quirl's `ExtensionAction::validate`, as the codec
    /// checks them (`domain_bounds`): terminal-safe text, portable names, no
    /// NUL in environment values, bounded terminal-safe annotations. The
    /// capability rule needs the handler's declaration and stays with the
    /// runtime.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        match self {
            ExtensionAction::Diagnose { message } => terminal_safe("message", message),
            ExtensionAction::RewritePlan { source } => terminal_safe("source", source),
            ExtensionAction::BlockExecution { reason } => terminal_safe("reason", reason),
            ExtensionAction::SetEnvironment { name, value } => {
                portable_name("environment name", name).map_err(|e| e.error.at("name"))?;
                if value.contains('\0') {
                    return Err(
                        ProtocolError::domain("environment value contains a NUL byte").at("value"),
                    );
                }
                Ok(())
            }
            ExtensionAction::AnnotateResult { key, value } => {
                portable_name("annotation key", key).map_err(|e| e.error.at("key"))?;
                // The annotation bounds (nodes, depth, text), then no
                // terminal controls in any key or string.
                check_terminal_safe(value).map_err(|e| e.at("value"))
            }
        }
    }
}

impl Validate for ExtensionAction {
    fn validate(&self) -> Result<(), ProtocolError> {
        ExtensionAction::validate(self)
    }
}

/// Result of dispatching one event to one handler (`event` operation result item).
///
/// `error` is written as `null` when absent. At most [`EVENT_ACTIONS_MAX`]
/// actions, none when `error` is set (a failed handler keeps no actions);
/// `handler` is a registered handler name (portable, at most
/// [`REGISTRATION_NAME_BYTES_MAX`] bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EventHandlerReport {
    /// Handler name.
    pub handler: String,
    /// Validated actions.
    pub actions: Vec<ExtensionAction>,
    /// Handler failure.
    pub error: Option<ShellError>,
}

decode_record!(EventHandlerReport "event handler report" {
    handler: req,
    actions: req,
    error: req,
});

impl Validate for EventHandlerReport {
    fn validate(&self) -> Result<(), ProtocolError> {
        bounded_text(
            "event handler name",
            &self.handler,
            REGISTRATION_NAME_BYTES_MAX,
        )
        .and_then(|()| portable_name("event handler name", &self.handler))
        .map_err(|e| e.error.at("handler"))?;
        if self.error.is_some() && !self.actions.is_empty() {
            return Err(ProtocolError::domain(
                "a failed handler's report carries actions; a failed handler keeps none",
            )
            .at("actions"));
        }
        if self.actions.len() > EVENT_ACTIONS_MAX {
            return Err(ProtocolError::domain(format!(
                "{} actions; at most {EVENT_ACTIONS_MAX} are allowed",
                self.actions.len()
            ))
            .at("actions"));
        }
        Ok(())
    }
}
