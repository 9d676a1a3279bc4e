//! Lua values → the protocol crate's records.
//!
//! A table the guest hands to the SDK (a registration, a configuration, an
//! event handler's actions, a runner result) is first read with raw access
//! and within its shape bounds by [`crate::convert::to_json`]; the records
//! are then built here field by field into the protocol crate's own types
//! (`quirl_lua_protocol::records`), never into copies of them, and the
//! callers check them with the protocol's own validation. So the worker
//! cannot build a record the protocol would reject.
//!
//! The reading rules are those of the Lua SDK (DESIGN §15.9, §15.10): every
//! field a record does not declare is an error; integers must be Lua
//! integers (a float such as `2.0` is not one); a Lua table has no separate
//! empty array, so an empty table `{}` reads as an empty list; an absent
//! optional field and the null value read as absent.

use quirl_lua_protocol::records::{
    CommandRegistration, CompletionRegistration, ContributionKind, ContributionRegistration,
    EventKind, EventSubscription, ExtensionAction, ExtensionCapability, PromptRegistration,
};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

/// Worker-only (the Lua SDK's default; no protocol counterpart): the
/// deadline of a prompt segment that declares none, in milliseconds.
pub const PROMPT_DEADLINE_MS_DEFAULT: u64 = 8;

/// Why a table is not the record: names the field and what was wrong.
pub type ReadError = String;

static EMPTY: std::sync::LazyLock<Map<String, Json>> = std::sync::LazyLock::new(Map::new);

fn kind_of(value: &Json) -> &'static str {
    match value {
        Json::Null => "nil",
        Json::Bool(_) => "a boolean",
        Json::Number(number) if number.is_f64() => "a float",
        Json::Number(_) => "an integer",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a table with string keys",
    }
}

/// The fields of one table, read once each; [`Fields::finish`] refuses
/// the fields nobody read.
pub struct Fields<'a> {
    path: String,
    map: &'a Map<String, Json>,
    read: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// The fields of `value`, which must be a table with string keys (an
    /// empty table included). `path` names it in errors (empty at the top).
    pub fn of(value: &'a Json, path: &str) -> Result<Self, ReadError> {
        match value {
            Json::Object(map) => Ok(Self {
                path: path.to_owned(),
                map,
                read: Vec::new(),
            }),
            other => Err(format!(
                "{}expected a table of fields, found {}",
                Self::prefix(path),
                kind_of(other)
            )),
        }
    }

    fn prefix(path: &str) -> String {
        if path.is_empty() {
            String::new()
        } else {
            format!("`{path}`: ")
        }
    }

    fn name(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    fn wrong(&self, field: &str, expected: &str, found: &Json) -> ReadError {
        format!(
            "field `{}` must be {expected}, found {}",
            self.name(field),
            kind_of(found)
        )
    }

    /// The raw value of `field`; `None` when absent or null.
    pub fn value(&mut self, field: &'static str) -> Option<&'a Json> {
        self.read.push(field);
        self.map.get(field).filter(|value| !value.is_null())
    }

    fn required(&mut self, field: &'static str) -> Result<&'a Json, ReadError> {
        let name = self.name(field);
        self.value(field)
            .ok_or_else(|| format!("missing field `{name}`"))
    }

    /// A required string.
    pub fn string(&mut self, field: &'static str) -> Result<String, ReadError> {
        let value = self.required(field)?;
        self.as_string(field, value)
    }

    fn as_string(&self, field: &str, value: &Json) -> Result<String, ReadError> {
        value
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.wrong(field, "a string", value))
    }

    /// An optional string.
    pub fn optional_string(&mut self, field: &'static str) -> Result<Option<String>, ReadError> {
        self.value(field)
            .map(|value| self.as_string(field, value))
            .transpose()
    }

    /// A string, `default` when absent.
    pub fn string_or(&mut self, field: &'static str, default: &str) -> Result<String, ReadError> {
        Ok(self
            .optional_string(field)?
            .unwrap_or_else(|| default.to_owned()))
    }

    /// A boolean, `default` when absent.
    pub fn bool_or(&mut self, field: &'static str, default: bool) -> Result<bool, ReadError> {
        match self.value(field) {
            None => Ok(default),
            Some(value) => value
                .as_bool()
                .ok_or_else(|| self.wrong(field, "a boolean", value)),
        }
    }

    /// An optional integer that fits `T`.
    pub fn optional_integer<T: TryFrom<i64> + TryFrom<u64>>(
        &mut self,
        field: &'static str,
    ) -> Result<Option<T>, ReadError> {
        let Some(value) = self.value(field) else {
            return Ok(None);
        };
        let fits = match (value.as_u64(), value.as_i64()) {
            (Some(unsigned), _) => T::try_from(unsigned).ok(),
            (None, Some(signed)) => T::try_from(signed).ok(),
            (None, None) => return Err(self.wrong(field, "an integer", value)),
        };
        fits.map(Some).ok_or_else(|| {
            format!(
                "field `{}` holds {value}, outside the range of {}",
                self.name(field),
                std::any::type_name::<T>()
            )
        })
    }

    /// A required integer that fits `T`.
    pub fn integer<T: TryFrom<i64> + TryFrom<u64>>(
        &mut self,
        field: &'static str,
    ) -> Result<T, ReadError> {
        let name = self.name(field);
        self.optional_integer(field)?
            .ok_or_else(|| format!("missing field `{name}`"))
    }

    /// A list (an empty table reads as an empty list); `None` when absent.
    pub fn optional_list(&mut self, field: &'static str) -> Result<Option<&'a [Json]>, ReadError> {
        match self.value(field) {
            None => Ok(None),
            Some(Json::Array(items)) => Ok(Some(items)),
            Some(Json::Object(map)) if map.is_empty() => Ok(Some(&[])),
            Some(other) => Err(self.wrong(field, "a list", other)),
        }
    }

    /// A list of strings, `None` when absent.
    pub fn optional_strings(
        &mut self,
        field: &'static str,
    ) -> Result<Option<Vec<String>>, ReadError> {
        let Some(items) = self.optional_list(field)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|item| self.as_string(field, item))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// A required list of strings.
    pub fn strings(&mut self, field: &'static str) -> Result<Vec<String>, ReadError> {
        let name = self.name(field);
        self.optional_strings(field)?
            .ok_or_else(|| format!("missing field `{name}`"))
    }

    /// A required list of names of a protocol enumeration (`all` and
    /// `name` are its `ALL` and `as_str`).
    pub fn names<T: Copy>(
        &mut self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Vec<T>, ReadError> {
        let list_name = self.name(field);
        let items = self
            .optional_list(field)?
            .ok_or_else(|| format!("missing field `{list_name}`"))?;
        items
            .iter()
            .map(|item| self.variant(field, item, all, name))
            .collect()
    }

    /// A required name of a protocol enumeration.
    pub fn name_of<T: Copy>(
        &mut self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<T, ReadError> {
        let value = self.required(field)?;
        self.variant(field, value, all, name)
    }

    fn variant<T: Copy>(
        &self,
        field: &str,
        value: &Json,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<T, ReadError> {
        let text = value
            .as_str()
            .ok_or_else(|| self.wrong(field, "a string", value))?;
        all.iter()
            .copied()
            .find(|variant| name(*variant) == text)
            .ok_or_else(|| {
                let known: Vec<_> = all.iter().map(|variant| name(*variant)).collect();
                format!(
                    "field `{}` holds unknown variant `{text}`; expected one of {}",
                    self.name(field),
                    known.join(", ")
                )
            })
    }

    /// A required table of string values by string key.
    pub fn string_map(
        &mut self,
        field: &'static str,
    ) -> Result<BTreeMap<String, String>, ReadError> {
        let value = self.required(field)?;
        let map = match value {
            Json::Object(map) => map,
            other => return Err(self.wrong(field, "a table of strings by name", other)),
        };
        map.iter()
            .map(|(key, item)| Ok((key.clone(), self.as_string(field, item)?)))
            .collect()
    }

    /// The fields of a nested table (absent: an empty one, so that every
    /// field of it takes its default).
    pub fn nested(&mut self, field: &'static str) -> Result<Fields<'a>, ReadError> {
        let path = self.name(field);
        match self.value(field) {
            None => Ok(Fields {
                path,
                map: &EMPTY,
                read: Vec::new(),
            }),
            Some(value) => Fields::of(value, &path),
        }
    }

    /// Every entry, for a table keyed by names the record does not fix
    /// (such as custom themes by name); all of them count as read.
    pub fn entries(mut self) -> serde_json::map::Iter<'a> {
        self.read.clear();
        self.map.iter()
    }

    /// Refuse the fields nobody read (the record does not declare them).
    pub fn finish(self) -> Result<(), ReadError> {
        match self
            .map
            .keys()
            .find(|key| !self.read.contains(&key.as_str()))
        {
            Some(key) => {
                let expected: Vec<String> =
                    self.read.iter().map(|field| format!("`{field}`")).collect();
                let expected = match expected.as_slice() {
                    [] => "no fields".to_owned(),
                    [one] => one.clone(),
                    [first, second] => format!("{first} or {second}"),
                    all => format!("one of {}", all.join(", ")),
                };
                Err(format!(
                    "unknown field `{}`, expected {expected}",
                    self.name(key)
                ))
            }
            None => Ok(()),
        }
    }
}

/// A prompt segment declaration (`deadline_ms` defaults to
/// [`PROMPT_DEADLINE_MS_DEFAULT`]).
pub fn prompt_registration(value: &Json) -> Result<PromptRegistration, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let record = PromptRegistration {
        name: fields.string("name")?,
        deadline_ms: fields
            .optional_integer("deadline_ms")?
            .unwrap_or(PROMPT_DEADLINE_MS_DEFAULT),
    };
    fields.finish().map(|()| record)
}

/// A completion provider declaration.
pub fn completion_registration(value: &Json) -> Result<CompletionRegistration, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let record = CompletionRegistration {
        command: fields.string("command")?,
    };
    fields.finish().map(|()| record)
}

/// A plugin command declaration (every field required).
pub fn command_registration(value: &Json) -> Result<CommandRegistration, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let record = CommandRegistration {
        name: fields.string("name")?,
        signature: fields.string("signature")?,
        summary: fields.string("summary")?,
        details: fields.string("details")?,
        input_type: fields.string("input_type")?,
        output_type: fields.string("output_type")?,
        examples: fields.strings("examples")?,
        effects: fields.strings("effects")?,
        error_codes: fields.string_map("error_codes")?,
    };
    fields.finish().map(|()| record)
}

/// An event handler declaration (every field required).
pub fn event_subscription(value: &Json) -> Result<EventSubscription, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let record = EventSubscription {
        name: fields.string("name")?,
        events: fields.names("events", EventKind::ALL, EventKind::as_str)?,
        capabilities: fields.names(
            "capabilities",
            ExtensionCapability::ALL,
            ExtensionCapability::as_str,
        )?,
        deadline_ms: fields.integer("deadline_ms")?,
    };
    fields.finish().map(|()| record)
}

/// A contribution declaration (`plain_fallback` optional).
pub fn contribution_registration(value: &Json) -> Result<ContributionRegistration, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let record = ContributionRegistration {
        kind: fields.name_of("kind", ContributionKind::ALL, ContributionKind::as_str)?,
        name: fields.string("name")?,
        deadline_ms: fields.integer("deadline_ms")?,
        plain_fallback: fields.optional_string("plain_fallback")?,
    };
    fields.finish().map(|()| record)
}

/// One action an event handler returned, tagged by `action`.
pub fn extension_action(value: &Json) -> Result<ExtensionAction, ReadError> {
    let mut fields = Fields::of(value, "")?;
    let tag = fields.string("action")?;
    let action = match tag.as_str() {
        "diagnose" => ExtensionAction::Diagnose {
            message: fields.string("message")?,
        },
        "rewrite_plan" => ExtensionAction::RewritePlan {
            source: fields.string("source")?,
        },
        "set_environment" => ExtensionAction::SetEnvironment {
            name: fields.string("name")?,
            value: fields.string("value")?,
        },
        "block_execution" => ExtensionAction::BlockExecution {
            reason: fields.string("reason")?,
        },
        "annotate_result" => ExtensionAction::AnnotateResult {
            key: fields.string("key")?,
            value: fields.value("value").cloned().unwrap_or(Json::Null),
        },
        other => {
            return Err(format!(
                "unknown action `{other}`; expected diagnose, rewrite_plan, set_environment, block_execution or annotate_result"
            ));
        }
    };
    fields.finish().map(|()| action)
}

/// The actions an event handler returned: a list (an empty table is no
/// action).
pub fn extension_actions(value: &Json) -> Result<Vec<ExtensionAction>, ReadError> {
    match value {
        Json::Object(map) if map.is_empty() => Ok(Vec::new()),
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                extension_action(item).map_err(|error| format!("action {}: {error}", index + 1))
            })
            .collect(),
        other => Err(format!(
            "expected a list of actions, found {}",
            kind_of(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use quirl_lua_protocol::records::{OperationKind, OperationResult, PluginRegistrations};
    use serde_json::json;

    #[test]
    fn registrations_read_into_the_protocol_records_and_round_trip() {
        let registrations = PluginRegistrations {
            prompt_segments: vec![prompt_registration(&json!({"name": "dir"})).unwrap()],
            completion_providers: vec![
                completion_registration(&json!({"command": "git"})).unwrap(),
            ],
            commands: vec![
                command_registration(&json!({
                    "name": "hello", "signature": "hello", "summary": "s", "details": "d",
                    "input_type": "Nothing", "output_type": "String", "examples": ["hello"],
                    "effects": ["none"], "error_codes": {"E1": "bad"}
                }))
                .unwrap(),
            ],
            events: vec![
                event_subscription(&json!({
                    "name": "watch", "events": ["output"],
                    "capabilities": ["events_observe", "output_read"], "deadline_ms": 20
                }))
                .unwrap(),
            ],
            contributions: vec![
                contribution_registration(&json!({
                    "kind": "panel", "name": "p", "deadline_ms": 5, "plain_fallback": "text"
                }))
                .unwrap(),
            ],
        };
        assert_eq!(registrations.prompt_segments[0].deadline_ms, 8);
        registrations.validate().unwrap();
        // What the worker built is what the protocol decodes from its wire form.
        let wire = OperationResult::Plugin(registrations.clone())
            .to_value()
            .unwrap();
        assert_eq!(
            OperationResult::decode(OperationKind::LoadPlugin, &wire).unwrap(),
            OperationResult::Plugin(registrations)
        );
    }

    #[test]
    fn unknown_fields_wrong_types_and_unknown_names_are_refused() {
        let refused = [
            prompt_registration(&json!({"name": "a", "extra": 1})).unwrap_err(),
            prompt_registration(&json!({"name": "a", "deadline_ms": 2.0})).unwrap_err(),
            prompt_registration(&json!({"name": 1})).unwrap_err(),
            completion_registration(&json!({})).unwrap_err(),
            event_subscription(&json!({"name": "h", "events": ["nope"],
                "capabilities": ["events_observe"], "deadline_ms": 1}))
            .unwrap_err(),
            contribution_registration(&json!({"kind": "panel", "name": "p", "deadline_ms": -1}))
                .unwrap_err(),
        ];
        assert!(
            refused[0].contains("unknown field `extra`"),
            "{}",
            refused[0]
        );
        assert!(refused[1].contains("deadline_ms"), "{}", refused[1]);
        assert!(
            refused[2].contains("`name` must be a string"),
            "{}",
            refused[2]
        );
        assert!(
            refused[3].contains("missing field `command`"),
            "{}",
            refused[3]
        );
        assert!(
            refused[4].contains("unknown variant `nope`"),
            "{}",
            refused[4]
        );
        assert!(refused[5].contains("outside the range"), "{}", refused[5]);
    }

    #[test]
    fn an_empty_table_is_an_empty_list_and_actions_read_by_tag() {
        let handler = event_subscription(&json!({"name": "h", "events": {},
            "capabilities": {}, "deadline_ms": 1}))
        .unwrap();
        assert!(handler.events.is_empty() && handler.capabilities.is_empty());
        assert!(extension_actions(&json!({})).unwrap().is_empty());
        assert_eq!(
            extension_actions(&json!([{"action": "block_execution", "reason": "no"}])).unwrap(),
            vec![ExtensionAction::BlockExecution {
                reason: "no".to_owned()
            }]
        );
        assert!(extension_actions(&json!([{"action": "diagnose"}])).is_err());
        assert!(
            extension_actions(&json!([{"action": "diagnose", "message": "m", "x": 1}])).is_err()
        );
        assert!(extension_actions(&json!("x")).is_err());
        assert!(extension_actions(&json!(null)).is_err());
    }
}
