//! Extension events (`quirl.extension@2`): the event record `event`
//! delivers, the view a handler sees, and the actions a handler may return.
//!
//! The result of `event` is an array of handler reports in handler-name
//! order, each `{"actions":[…],"error":null|{error record},"handler":"name"}`
//! (keys sorted, `error` always present, as Quirl's worker writes them).

use crate::error::{OpError, has_terminal_controls};
use crate::registry::{Capability, EventKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};

/// The extension protocol version events must carry.
pub const EXTENSION_PROTOCOL_VERSION: u64 = 2;
/// Actions one handler may return.
pub const ACTIONS_MAX: usize = 64;
const JSON_NODES_MAX: usize = 100_000;
const JSON_DEPTH_MAX: usize = 64;
const JSON_TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// A validated event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Sequence number.
    pub sequence: u64,
    /// Category.
    pub kind: EventKind,
    /// The wire record.
    pub record: Json,
}

fn event_error(message: impl Into<String>) -> OpError {
    OpError::validation(message).with_help("Fix the extension declaration before loading it")
}

fn safe_text(what: &str, text: Option<&Json>) -> Result<(), OpError> {
    if let Some(Json::String(text)) = text
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
    /// Read an event record and check it follows `previous` (Quirl's
    /// `ExtensionEvent::validate_after`).
    pub fn from_json(record: &Json, previous: Option<u64>) -> Result<Self, OpError> {
        let version = record
            .get("protocol_version")
            .and_then(Json::as_u64)
            .ok_or_else(|| event_error("extension event needs `protocol_version`"))?;
        if version != EXTENSION_PROTOCOL_VERSION {
            return Err(event_error(format!(
                "unsupported extension event protocol version {version}"
            )));
        }
        let sequence = record
            .get("sequence")
            .and_then(Json::as_u64)
            .ok_or_else(|| event_error("extension event needs `sequence`"))?;
        if previous.is_some_and(|previous| sequence <= previous) {
            return Err(event_error(format!(
                "extension event sequence {sequence} is not greater than its predecessor"
            )));
        }
        let data = record
            .get("data")
            .ok_or_else(|| event_error("extension event needs `data`"))?;
        let kind: EventKind = data
            .get("kind")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| event_error(format!("unknown extension event kind: {e}")))?
            .ok_or_else(|| event_error("extension event data needs `kind`"))?;
        safe_text("extension output", data.get("text"))?;
        safe_text("extension progress message", data.get("message"))?;
        if kind == EventKind::Cancellation {
            safe_text("extension cancellation reason", data.get("reason"))?;
        }
        Ok(Self {
            sequence,
            kind,
            record: record.clone(),
        })
    }

    /// The record a handler receives: output text is removed unless the
    /// handler declared `output_read`, and a nested error record loses its
    /// empty optional parts (Quirl's in-memory error shape).
    pub fn view(&self, capabilities: &[Capability]) -> Json {
        let mut record = self.record.clone();
        if let Some(data) = record.get_mut("data").and_then(Json::as_object_mut) {
            if self.kind == EventKind::Output && !capabilities.contains(&Capability::OutputRead) {
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

/// An action returned by an event handler.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
#[allow(missing_docs)]
pub enum Action {
    Diagnose { message: String },
    RewritePlan { source: String },
    SetEnvironment { name: String, value: String },
    BlockExecution { reason: String },
    AnnotateResult { key: String, value: Json },
}

impl Action {
    fn required(&self) -> Capability {
        match self {
            Self::Diagnose { .. } | Self::AnnotateResult { .. } => Capability::EventsObserve,
            Self::RewritePlan { .. } => Capability::PlanRewrite,
            Self::SetEnvironment { .. } => Capability::EnvironmentMutate,
            Self::BlockExecution { .. } => Capability::ExecutionBlock,
        }
    }

    /// Quirl's `ExtensionAction::validate`.
    pub fn validate(&self, granted: &[Capability]) -> Result<(), OpError> {
        let required = self.required();
        if !granted.contains(&required) {
            return Err(event_error(format!(
                "extension action requires undeclared capability `{}`",
                required.name()
            )));
        }
        match self {
            Self::Diagnose { message } => safe_text("diagnostic", Some(&json!(message))),
            Self::RewritePlan { source } => safe_text("rewritten plan", Some(&json!(source))),
            Self::BlockExecution { reason } => safe_text("block reason", Some(&json!(reason))),
            Self::SetEnvironment { name, value } => {
                portable("environment name", name)?;
                if value.contains('\0') {
                    return Err(event_error("environment value contains a NUL byte"));
                }
                Ok(())
            }
            Self::AnnotateResult { key, value } => {
                portable("annotation key", key)?;
                reject_json_terminal_controls("result annotation", value)
            }
        }
    }
}

fn portable(what: &str, value: &str) -> Result<(), OpError> {
    if value.is_empty()
        || !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Err(
            event_error(format!("{what} `{value}` contains unsupported characters"))
                .with_help("Use ASCII letters, digits, dot, underscore, dash, or slash"),
        );
    }
    Ok(())
}

fn json_limit(what: &str, kind: &str, limit: usize, observed: usize) -> OpError {
    OpError::resource_limit(format!("{what} exceeds its JSON {kind} limit"))
        .with_context(format!("limit: {limit}; observed: {observed}"))
        .with_help("Return a smaller and shallower extension value")
}

/// Reject JSON whose keys or strings could change terminal state, within
/// Quirl's scan bounds.
pub fn reject_json_terminal_controls(what: &str, value: &Json) -> Result<(), OpError> {
    let mut stack = vec![(value, 0_usize)];
    let mut nodes = 1_usize;
    let mut text = 0_usize;
    while let Some((value, depth)) = stack.pop() {
        if depth > JSON_DEPTH_MAX {
            return Err(json_limit(what, "depth", JSON_DEPTH_MAX, depth));
        }
        let mut check = |s: &str| -> Result<(), OpError> {
            text += s.len();
            if text > JSON_TEXT_BYTES_MAX {
                return Err(json_limit(what, "text bytes", JSON_TEXT_BYTES_MAX, text));
            }
            safe_text(what, Some(&Json::String(s.to_owned())))
        };
        match value {
            Json::String(s) => check(s)?,
            Json::Array(items) => {
                nodes += items.len();
                stack.extend(items.iter().map(|v| (v, depth + 1)));
            }
            Json::Object(map) => {
                nodes += map.len();
                for (key, item) in map {
                    check(key)?;
                    stack.push((item, depth + 1));
                }
            }
            _ => {}
        }
        if nodes > JSON_NODES_MAX {
            return Err(json_limit(what, "nodes", JSON_NODES_MAX, nodes));
        }
    }
    Ok(())
}

/// Read and validate a handler's return value.
pub fn actions(
    value: &Json,
    handler: &str,
    granted: &[Capability],
) -> Result<Vec<Action>, OpError> {
    // Quirl's `validation_error(handler, …)`: labelled with the handler's
    // name, with the SDK-shape help.
    let actions: Vec<Action> = crate::lenient::from_json(value).map_err(|e| {
        OpError::schema(
            handler,
            format!("event handler must return an array of declared actions: {e}"),
        )
    })?;
    if actions.len() > ACTIONS_MAX {
        return Err(crate::convert::shape_limit(
            "Lua callback return",
            "event actions",
            actions.len(),
            ACTIONS_MAX,
        ));
    }
    for action in &actions {
        action.validate(granted)?;
    }
    Ok(actions)
}

/// One handler report.
pub fn report(handler: &str, outcome: Result<Vec<Action>, OpError>) -> Json {
    let (actions, error) = match outcome {
        Ok(actions) => (actions, Json::Null),
        Err(error) => (Vec::new(), error.bounded().to_json()),
    };
    let actions = actions
        .iter()
        .map(|a| serde_json::to_value(a).unwrap_or(Json::Null))
        .collect::<Vec<_>>();
    let mut map = Map::new();
    map.insert("actions".to_owned(), Json::Array(actions));
    map.insert("error".to_owned(), error);
    map.insert("handler".to_owned(), Json::from(handler));
    crate::convert::sort_keys(Json::Object(map))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn output_event(sequence: u64) -> Json {
        json!({"protocol_version": 2, "sequence": sequence,
               "data": {"kind": "output", "stream": "stdout", "bytes": 3, "text": "abc"}})
    }

    #[test]
    fn sequences_must_increase_and_versions_match() {
        assert!(Event::from_json(&output_event(5), Some(4)).is_ok());
        assert!(Event::from_json(&output_event(5), Some(5)).is_err());
        let mut old = output_event(1);
        old["protocol_version"] = json!(1);
        assert!(Event::from_json(&old, None).is_err());
    }

    #[test]
    fn output_text_is_visible_only_with_output_read() {
        let event = Event::from_json(&output_event(1), None).unwrap();
        assert!(
            event.view(&[Capability::EventsObserve])["data"]
                .get("text")
                .is_none()
        );
        assert_eq!(
            event.view(&[Capability::EventsObserve, Capability::OutputRead])["data"]["text"],
            "abc"
        );
    }

    #[test]
    fn actions_need_their_capability() {
        let value = json!([{"action": "block_execution", "reason": "no"}]);
        assert!(actions(&value, "h", &[Capability::EventsObserve]).is_err());
        assert!(
            actions(
                &value,
                "h",
                &[Capability::EventsObserve, Capability::ExecutionBlock]
            )
            .is_ok()
        );
        assert!(actions(&json!({}), "h", &[]).unwrap().is_empty());
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
            Ok(vec![Action::Diagnose {
                message: "m".to_owned(),
            }]),
        ))
        .unwrap();
        assert_eq!(
            text,
            r#"{"actions":[{"action":"diagnose","message":"m"}],"error":null,"handler":"h"}"#
        );
    }
}
