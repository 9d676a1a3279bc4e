//! Extension events (`quirl.extension@2`): the event record `event`
//! delivers, the view a handler sees, and the actions a handler may return.
//!
//! The result of `event` is an array of handler reports in handler-name
//! order, each `{"actions":[…],"error":null|{error record},"handler":"name"}`
//! (keys sorted, `error` always present, as Quirl's worker writes them). The
//! event, the actions and the reports are the protocol crate's records.

use crate::error::{OpError, has_terminal_controls};
use crate::records_from_lua;
use quirl_lua_protocol::limits::{EVENT_ACTIONS_MAX, EXTENSION_PROTOCOL_VERSION};
use quirl_lua_protocol::records::{
    EventHandlerReport, EventKind, ExtensionAction, ExtensionCapability, ExtensionEvent,
    ExtensionEventData, ShellError,
};
use serde_json::Value as Json;

/// A validated event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Sequence number.
    pub sequence: u64,
    /// Category.
    pub kind: EventKind,
    /// The wire record, as handlers receive it (see [`Event::view`]).
    pub record: Json,
}

fn event_error(message: impl Into<String>) -> OpError {
    OpError::validation(message).with_help("Fix the extension declaration before loading it")
}

fn safe_text(what: &str, text: Option<&str>) -> Result<(), OpError> {
    if let Some(text) = text
        && has_terminal_controls(text)
    {
        return Err(
            event_error(format!("{what} contains forbidden terminal control bytes"))
                .with_help("Return plain text or typed styled values; Quirl owns terminal control"),
        );
    }
    Ok(())
}

impl Event {
    /// Check a decoded event follows `previous` (Quirl's
    /// `ExtensionEvent::validate_after`) and keep its wire form.
    pub fn new(event: &ExtensionEvent, previous: Option<u64>) -> Result<Self, OpError> {
        let version = event.protocol_version;
        if version != EXTENSION_PROTOCOL_VERSION {
            return Err(event_error(format!(
                "unsupported extension event protocol version {version}"
            )));
        }
        let sequence = event.sequence;
        if previous.is_some_and(|previous| sequence <= previous) {
            return Err(event_error(format!(
                "extension event sequence {sequence} is not greater than its predecessor"
            )));
        }
        match &event.data {
            ExtensionEventData::Output { text, .. } => {
                safe_text("extension output", text.as_deref())?;
            }
            ExtensionEventData::ExecutionProgress { message, .. } => {
                safe_text("extension progress message", message.as_deref())?;
            }
            ExtensionEventData::Cancellation { reason } => {
                safe_text("extension cancellation reason", Some(reason))?;
            }
            _ => {}
        }
        let record = serde_json::to_value(event)
            .map_err(|e| event_error(format!("extension event cannot be represented: {e}")))?;
        Ok(Self {
            sequence,
            kind: event.data.kind(),
            record,
        })
    }

    /// The record a handler receives: output text is removed unless the
    /// handler declared `output_read`, and a nested error record loses its
    /// empty optional parts (Quirl's in-memory error shape).
    pub fn view(&self, capabilities: &[ExtensionCapability]) -> Json {
        let mut record = self.record.clone();
        if let Some(data) = record.get_mut("data").and_then(Json::as_object_mut) {
            if self.kind == EventKind::Output
                && !capabilities.contains(&ExtensionCapability::OutputRead)
            {
                data.remove("text");
            }
            if let Some(Json::Object(error)) = data.get_mut("error") {
                for key in ["labels", "context", "help"] {
                    if error
                        .get(key)
                        .and_then(Json::as_array)
                        .is_some_and(Vec::is_empty)
                    {
                        error.remove(key);
                    }
                }
                for key in ["command", "exit_status"] {
                    if error.get(key).is_some_and(Json::is_null) {
                        error.remove(key);
                    }
                }
            }
        }
        record
    }
}

/// The capability an action needs (Quirl's `ExtensionAction::validate`).
pub const fn required_capability(action: &ExtensionAction) -> ExtensionCapability {
    match action {
        ExtensionAction::Diagnose { .. } | ExtensionAction::AnnotateResult { .. } => {
            ExtensionCapability::EventsObserve
        }
        ExtensionAction::RewritePlan { .. } => ExtensionCapability::PlanRewrite,
        ExtensionAction::SetEnvironment { .. } => ExtensionCapability::EnvironmentMutate,
        ExtensionAction::BlockExecution { .. } => ExtensionCapability::ExecutionBlock,
    }
}

/// Quirl's `ExtensionAction::validate`: the capability rule (which needs
/// the handler's declaration), then the protocol's data rules.
pub fn validate_action(
    action: &ExtensionAction,
    granted: &[ExtensionCapability],
) -> Result<(), OpError> {
    let required = required_capability(action);
    if !granted.contains(&required) {
        return Err(event_error(format!(
            "extension action requires undeclared capability `{}`",
            required.as_str()
        )));
    }
    action.validate().map_err(|e| {
        event_error(format!(
            "extension action `{}` is refused: {}",
            action_name(action),
            e.message()
        ))
        .with_context(format!("field: {}", e.context()))
    })
}

const fn action_name(action: &ExtensionAction) -> &'static str {
    match action {
        ExtensionAction::Diagnose { .. } => "diagnose",
        ExtensionAction::RewritePlan { .. } => "rewrite_plan",
        ExtensionAction::SetEnvironment { .. } => "set_environment",
        ExtensionAction::BlockExecution { .. } => "block_execution",
        ExtensionAction::AnnotateResult { .. } => "annotate_result",
    }
}

/// Check a free-form value a callback returned by the protocol's rule for
/// it (annotation bounds, no terminal controls in any key or string).
pub fn check_terminal_safe(what: &str, value: &Json) -> Result<(), OpError> {
    quirl_lua_protocol::value::check_terminal_safe(value).map_err(|e| {
        event_error(format!("{what} is refused: {}", e.message()))
            .with_help("Return plain text or typed styled values; Quirl owns terminal control")
    })
}

/// Read and validate a handler's return value.
pub fn actions(
    value: &Json,
    handler: &str,
    granted: &[ExtensionCapability],
) -> Result<Vec<ExtensionAction>, OpError> {
    // Quirl's `validation_error(handler, …)`: labelled with the handler's
    // name, with the SDK-shape help.
    let actions = records_from_lua::extension_actions(value).map_err(|e| {
        OpError::schema(
            handler,
            format!("event handler must return an array of declared actions: {e}"),
        )
    })?;
    if actions.len() > EVENT_ACTIONS_MAX {
        return Err(crate::convert::shape_limit(
            "Lua callback return",
            "event actions",
            actions.len(),
            EVENT_ACTIONS_MAX,
        ));
    }
    for action in &actions {
        validate_action(action, granted)?;
    }
    Ok(actions)
}

/// One handler report (the protocol's record, in its wire form).
pub fn report(handler: &str, outcome: Result<Vec<ExtensionAction>, OpError>) -> Json {
    let (actions, error) = match outcome {
        Ok(actions) => (actions, None),
        Err(error) => (Vec::new(), Some(ShellError::from(error.bounded()))),
    };
    let report = EventHandlerReport {
        handler: handler.to_owned(),
        actions,
        error,
    };
    serde_json::to_value(&report).unwrap_or(Json::Null)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn output_event(sequence: u64) -> ExtensionEvent {
        ExtensionEvent {
            protocol_version: EXTENSION_PROTOCOL_VERSION,
            sequence,
            data: ExtensionEventData::Output {
                stream: quirl_lua_protocol::records::OutputStream::Stdout,
                bytes: 3,
                text: Some("abc".to_owned()),
            },
        }
    }

    #[test]
    fn sequences_must_increase_and_versions_match() {
        assert!(Event::new(&output_event(5), Some(4)).is_ok());
        assert!(Event::new(&output_event(5), Some(5)).is_err());
        let mut old = output_event(1);
        old.protocol_version = 1;
        assert!(Event::new(&old, None).is_err());
    }

    #[test]
    fn output_text_is_visible_only_with_output_read() {
        let event = Event::new(&output_event(1), None).unwrap();
        assert_eq!(
            event.record,
            json!({"protocol_version": 2, "sequence": 1,
                   "data": {"kind": "output", "stream": "stdout", "bytes": 3, "text": "abc"}})
        );
        assert!(
            event.view(&[ExtensionCapability::EventsObserve])["data"]
                .get("text")
                .is_none()
        );
        assert_eq!(
            event.view(&[
                ExtensionCapability::EventsObserve,
                ExtensionCapability::OutputRead
            ])["data"]["text"],
            "abc"
        );
    }

    #[test]
    fn actions_need_their_capability() {
        let value = json!([{"action": "block_execution", "reason": "no"}]);
        assert!(actions(&value, "h", &[ExtensionCapability::EventsObserve]).is_err());
        assert!(
            actions(
                &value,
                "h",
                &[
                    ExtensionCapability::EventsObserve,
                    ExtensionCapability::ExecutionBlock
                ]
            )
            .is_ok()
        );
        assert!(actions(&json!({}), "h", &[]).unwrap().is_empty());
        let unsafe_text = json!([{"action": "diagnose", "message": "\u{1b}[2J"}]);
        let error = actions(&unsafe_text, "h", &[ExtensionCapability::EventsObserve]).unwrap_err();
        assert!(error.message.contains("terminal control"), "{error:?}");
    }

    #[test]
    fn a_malformed_handler_result_carries_quirls_label_and_help() {
        let error = actions(&json!("nope"), "h", &[]).unwrap_err();
        assert!(
            error
                .message
                .starts_with("event handler must return an array of declared actions: ")
        );
        assert_eq!(error.labels[0].source.as_deref(), Some("h"));
        assert_eq!(error.labels[0].message, "schema mismatch");
        assert_eq!(
            error.help,
            ["Check the documented Lua SDK shape and remove unknown fields or invalid values"]
        );
    }

    #[test]
    fn reports_have_sorted_keys_and_a_null_error() {
        let text = serde_json::to_string(&report(
            "h",
            Ok(vec![ExtensionAction::Diagnose {
                message: "m".to_owned(),
            }]),
        ))
        .unwrap();
        assert_eq!(
            text,
            r#"{"actions":[{"action":"diagnose","message":"m"}],"error":null,"handler":"h"}"#
        );
        let failed = report("h", Err(OpError::lua("boom")));
        assert_eq!(failed["actions"], json!([]));
        assert_eq!(failed["error"]["code"], "lua");
        assert_eq!(failed["error"]["command"], Json::Null);
    }
}
