//! The plugin's UI callbacks: `render_prompt` (a prompt segment),
//! `complete` (a completion provider, its result bounded) and
//! `contribution`, each run under its own deadline (SPEC §7.1, §7.2).

use super::Vm;
use crate::convert::{RETURN_SHAPE, to_json};
use crate::diag::lua_failure;
use crate::error::{ErrorCode, OpError, has_terminal_controls};
use crate::events;
use crate::registry::contribution_title;
use mlua::Value;
use quirl_lua_protocol::limits::{
    COMPLETION_ITEM_BYTES_MAX, COMPLETION_ITEMS_MAX, COMPLETION_RESULT_BYTES_MAX,
    PROMPT_RETURN_BYTES_MAX,
};
use quirl_lua_protocol::records::ContributionKind;
use serde_json::Value as Json;

/// Deadline of completion callbacks (DESIGN §15.6; the protocol crate's one
/// definition, shared with the parent).
pub use quirl_lua_protocol::limits::COMPLETION_DEADLINE;

impl Vm {
    pub(super) fn render_prompt(&mut self, name: &str, context: &Json) -> Result<Json, OpError> {
        let (function, deadline) = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let callback = registry
                .prompts
                .get(name)
                .ok_or_else(|| OpError::schema(name, format!("unknown prompt segment `{name}`")))?;
            (self.callback(&callback.function)?, callback.deadline)
        };
        let context = self.context(context)?;
        self.begin(deadline)?;
        match self.call(&function, context)? {
            Value::Nil => Ok(Json::Null),
            Value::String(text) => {
                let bytes = text.as_bytes();
                if bytes.len() > PROMPT_RETURN_BYTES_MAX {
                    return Err(crate::convert::shape_limit(
                        "Lua callback return",
                        "prompt bytes",
                        bytes.len(),
                        PROMPT_RETURN_BYTES_MAX,
                    ));
                }
                let text = std::str::from_utf8(&bytes).map_err(|e| {
                    OpError::schema(
                        name,
                        format!("prompt segment must return valid UTF-8 text: {e}"),
                    )
                })?;
                if has_terminal_controls(text) {
                    return Err(OpError::validation(
                        "prompt segment contains forbidden terminal control bytes",
                    )
                    .with_help(
                        "Return plain text or typed styled values; Quirl owns terminal control",
                    ));
                }
                Ok(Json::String(text.to_owned()))
            }
            other => Err(OpError::schema(
                name,
                format!(
                    "prompt segment must return text or nil, not Lua {}",
                    other.type_name()
                ),
            )),
        }
    }

    pub(super) fn complete(&mut self, command: &str, context: &Json) -> Result<Json, OpError> {
        let function = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let key = registry.completions.get(command).ok_or_else(|| {
                OpError::schema(command, format!("unknown completion provider `{command}`"))
            })?;
            self.callback(key)?
        };
        let context = self.context(context)?;
        self.begin(COMPLETION_DEADLINE)?;
        let value = self.call(&function, context)?;
        let value = to_json(&value, &RETURN_SHAPE, "completion result")?;
        check_completion(&value, command)?;
        Ok(value)
    }

    pub(super) fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: &Json,
    ) -> Result<Json, OpError> {
        let (function, deadline) = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let callback = registry
                .contributions
                .get(&(kind, name.to_owned()))
                .ok_or_else(|| {
                    OpError::schema(
                        name,
                        format!("unknown {} contribution `{name}`", contribution_title(kind)),
                    )
                })?;
            (self.callback(&callback.function)?, callback.deadline)
        };
        let context = self.context(context)?;
        self.begin(deadline)?;
        let value = self.call(&function, context)?;
        let value = to_json(&value, &RETURN_SHAPE, "contribution result")?;
        events::check_terminal_safe("extension contribution output", &value)?;
        Ok(value)
    }
}

fn check_completion(value: &Json, command: &str) -> Result<(), OpError> {
    let Json::Array(items) = value else {
        return Err(OpError::schema(
            command,
            "completion provider must return an array",
        ));
    };
    if items.len() > COMPLETION_ITEMS_MAX {
        return Err(OpError::resource_limit(format!(
            "completion provider `{command}` returned too many items"
        ))
        .with_context(format!(
            "items: {}; limit: {COMPLETION_ITEMS_MAX}",
            items.len()
        ))
        .with_help("Return the most relevant completion items and keep the result bounded"));
    }
    let mut total = 0_usize;
    for (index, item) in items.iter().enumerate() {
        total += item_bytes(index, item, command)?;
        if total > COMPLETION_RESULT_BYTES_MAX {
            return Err(crate::convert::shape_limit(
                "Lua callback return",
                "completion retained bytes",
                total,
                COMPLETION_RESULT_BYTES_MAX,
            ));
        }
    }
    Ok(())
}

/// The text bytes of completion item `index` (a string, or an object with a
/// string `value` and optional string display fields), at most
/// [`COMPLETION_ITEM_BYTES_MAX`].
fn item_bytes(index: usize, item: &Json, command: &str) -> Result<usize, OpError> {
    let bytes = match item {
        Json::String(value) => value.len(),
        Json::Object(object)
            if object.get("value").is_some_and(Json::is_string)
                && object.iter().all(|(key, value)| {
                    matches!(key.as_str(), "value" | "display" | "summary" | "detail")
                        && value.is_string()
                }) =>
        {
            object.values().filter_map(Json::as_str).map(str::len).sum()
        }
        _ => {
            return Err(OpError::schema(
                command,
                format!(
                    "completion item {index} must be a string or an object with a string `value` and optional string display fields"
                ),
            ));
        }
    };
    if bytes > COMPLETION_ITEM_BYTES_MAX {
        return Err(OpError::new(
            ErrorCode::ResourceLimit,
            format!("completion item {index} from `{command}` is too large"),
        )
        .with_context(format!(
            "bytes: {bytes}; limit: {COMPLETION_ITEM_BYTES_MAX}"
        ))
        .with_help("Shorten completion display, summary, and detail text"));
    }
    Ok(bytes)
}
