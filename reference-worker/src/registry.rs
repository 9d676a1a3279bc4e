//! Plugin registrations: the metadata a plugin declares through the SDK and
//! the callbacks behind it.
//!
//! The records and their bounds are Quirl's (`PluginRegistrations` and its
//! members); the result of `load_plugin` is [`Registrations::to_json`]. The
//! callbacks stay in the VM's registry; only validated metadata leaves the
//! worker.

use crate::error::{OpError, has_terminal_controls};
use mlua::RegistryKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// Prompt segments per plugin.
pub const PROMPT_SEGMENTS_MAX: usize = 64;
/// Metadata bytes across prompt segments.
pub const PROMPT_BYTES_MAX: usize = 8 * 1024;
/// Completion providers per plugin.
pub const COMPLETION_PROVIDERS_MAX: usize = 64;
/// Metadata bytes across completion providers.
pub const COMPLETION_BYTES_MAX: usize = 16 * 1024;
/// Commands per plugin.
pub const COMMANDS_MAX: usize = 64;
/// Metadata bytes across commands.
pub const COMMAND_BYTES_MAX: usize = 256 * 1024;
/// Event handlers per plugin.
pub const EVENT_HANDLERS_MAX: usize = 64;
/// Metadata bytes across event handlers.
pub const EVENT_BYTES_MAX: usize = 64 * 1024;
/// Contributions per plugin.
pub const CONTRIBUTIONS_MAX: usize = 64;
/// Metadata bytes across contributions.
pub const CONTRIBUTION_BYTES_MAX: usize = 64 * 1024;
/// Panel contributions per plugin.
pub const PANELS_MAX: usize = 16;
/// Metadata bytes across panel contributions.
pub const PANEL_BYTES_MAX: usize = 32 * 1024;
/// Bytes in a registration or callback name.
pub const NAME_BYTES_MAX: usize = 128;
/// Bytes in a short description or signature.
pub const DESCRIPTION_BYTES_MAX: usize = 2 * 1024;
/// Bytes in command details.
pub const DETAILS_BYTES_MAX: usize = 16 * 1024;
/// Bytes in a command type expression.
pub const TYPE_BYTES_MAX: usize = 256;
/// Prompt callback deadline bounds, milliseconds.
pub const PROMPT_DEADLINE_MS_MAX: u64 = 100;
/// Default prompt callback deadline, milliseconds.
pub const PROMPT_DEADLINE_MS_DEFAULT: u64 = 8;
/// Event and contribution callback deadline bound, milliseconds.
pub const EXTENSION_DEADLINE_MS_MAX: u64 = 250;
const EXAMPLES_MAX: usize = 32;
const EFFECTS_MAX: usize = 32;
const ERROR_CODES_MAX: usize = 64;
const EXAMPLE_BYTES_MAX: usize = 4 * 1024;
const EFFECT_BYTES_MAX: usize = 256;
const ERROR_CODE_BYTES_MAX: usize = 256;
const ERROR_DESCRIPTION_BYTES_MAX: usize = 2 * 1024;
const PANEL_FALLBACK_BYTES_MAX: usize = 16 * 1024;

/// A prompt segment declaration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PromptRegistration {
    /// Unique segment name.
    pub name: String,
    /// Per-render deadline, 1..=100 ms.
    #[serde(default = "default_prompt_deadline")]
    pub deadline_ms: u64,
}

fn default_prompt_deadline() -> u64 {
    PROMPT_DEADLINE_MS_DEFAULT
}

/// A completion provider declaration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CompletionRegistration {
    /// Command the provider completes.
    pub command: String,
}

/// A plugin command declaration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct CommandRegistration {
    pub name: String,
    pub signature: String,
    pub summary: String,
    pub details: String,
    pub input_type: String,
    pub output_type: String,
    pub examples: Vec<String>,
    pub effects: Vec<String>,
    pub error_codes: BTreeMap<String, String>,
}

/// Event categories.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum EventKind {
    SessionStart,
    SessionRestore,
    DirectoryChanged,
    CommandPlan,
    ExecutionProgress,
    Output,
    Cancellation,
    Result,
    Error,
}

/// Authorities an event handler may declare.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Capability {
    EventsObserve,
    PlanRewrite,
    EnvironmentMutate,
    OutputRead,
    ExecutionBlock,
    CatalogContribute,
    CompletionContribute,
    UiPanel,
}

impl Capability {
    /// The grant string that authorizes this capability.
    pub const fn grant(self) -> &'static str {
        match self {
            Self::EventsObserve => "events.observe",
            Self::PlanRewrite => "plan.rewrite",
            Self::EnvironmentMutate => "environment.mutate",
            Self::OutputRead => "output.read",
            Self::ExecutionBlock => "execution.block",
            Self::CatalogContribute => "catalog.register",
            Self::CompletionContribute => "completion.register",
            Self::UiPanel => "ui.panel",
        }
    }

    /// The wire name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::EventsObserve => "events_observe",
            Self::PlanRewrite => "plan_rewrite",
            Self::EnvironmentMutate => "environment_mutate",
            Self::OutputRead => "output_read",
            Self::ExecutionBlock => "execution_block",
            Self::CatalogContribute => "catalog_contribute",
            Self::CompletionContribute => "completion_contribute",
            Self::UiPanel => "ui_panel",
        }
    }
}

/// An event handler declaration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EventSubscription {
    /// Handler name.
    pub name: String,
    /// Event kinds delivered to the handler.
    pub events: Vec<EventKind>,
    /// Declared authorities.
    pub capabilities: Vec<Capability>,
    /// Per-callback deadline, 1..=250 ms.
    pub deadline_ms: u64,
}

/// Contribution surfaces.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ContributionKind {
    Catalog,
    Completion,
    Panel,
}

impl ContributionKind {
    /// The grant string that authorizes contributions of this kind.
    pub const fn grant(self) -> &'static str {
        match self {
            Self::Catalog => "catalog.register",
            Self::Completion => "completion.register",
            Self::Panel => "ui.panel",
        }
    }

    /// Parse a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "catalog" => Some(Self::Catalog),
            "completion" => Some(Self::Completion),
            "panel" => Some(Self::Panel),
            _ => None,
        }
    }

    /// Quirl's display name (`Debug` spelling of its enum).
    pub const fn title(self) -> &'static str {
        match self {
            Self::Catalog => "Catalog",
            Self::Completion => "Completion",
            Self::Panel => "Panel",
        }
    }
}

/// A contribution declaration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ContributionRegistration {
    /// Surface.
    pub kind: ContributionKind,
    /// Name, unique per kind.
    pub name: String,
    /// Per-callback deadline, 1..=250 ms.
    pub deadline_ms: u64,
    /// Plain-text fallback; required for panels.
    #[serde(default)]
    pub plain_fallback: Option<String>,
}

/// Metadata registered by one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Registrations {
    /// Prompt segments.
    pub prompt_segments: Vec<PromptRegistration>,
    /// Completion providers.
    pub completion_providers: Vec<CompletionRegistration>,
    /// Commands.
    pub commands: Vec<CommandRegistration>,
    /// Event handlers.
    pub events: Vec<EventSubscription>,
    /// Contributions.
    pub contributions: Vec<ContributionRegistration>,
}

impl Registrations {
    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.prompt_segments.is_empty()
            && self.completion_providers.is_empty()
            && self.commands.is_empty()
            && self.events.is_empty()
            && self.contributions.is_empty()
    }

    /// The `load_plugin` result (keys sorted, every field present).
    pub fn to_json(&self) -> Result<Value, OpError> {
        serde_json::to_value(self)
            .map(crate::convert::sort_keys)
            .map_err(|e| OpError::validation(format!("could not encode registrations: {e}")))
    }
}

/// A registered callback and the deadline it runs under.
#[derive(Debug)]
pub struct Callback {
    /// The function, anchored in the VM registry.
    pub function: RegistryKey,
    /// Wall deadline per invocation (capped by the policy when run).
    pub deadline: Duration,
}

/// An event handler callback.
#[derive(Debug)]
pub struct EventCallback {
    /// The function and its deadline.
    pub callback: Callback,
    /// Subscribed kinds.
    pub events: Vec<EventKind>,
    /// Declared authorities.
    pub capabilities: Vec<Capability>,
}

/// Registrations plus their callbacks.
#[derive(Debug, Default)]
pub struct Registry {
    /// Declared metadata.
    pub registrations: Registrations,
    /// Prompt callbacks by name.
    pub prompts: HashMap<String, Callback>,
    /// Completion callbacks by command.
    pub completions: HashMap<String, RegistryKey>,
    /// Command callbacks by name.
    pub commands: HashMap<String, RegistryKey>,
    /// Event callbacks by handler name.
    pub events: HashMap<String, EventCallback>,
    /// Contribution callbacks by (kind, name).
    pub contributions: HashMap<(ContributionKind, String), Callback>,
    /// Last event sequence accepted since the plugin was loaded.
    pub last_event_sequence: Option<u64>,
}

impl Registry {
    /// Forget every registration and callback.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Registration failure (`validation`).
pub fn registration_error(message: impl Into<String>) -> OpError {
    OpError::validation("Lua registration failed validation")
        .with_context(message)
        .with_context("lua failure: registration")
        .with_help("Fix the registration before loading the plugin")
}

/// Registration over a bound (`resource_limit`).
pub fn registration_limit(what: &str, unit: &str, observed: usize, limit: usize) -> OpError {
    OpError::resource_limit(format!("{what} exceed the configured registration limit"))
        .with_context(format!("{unit}: {observed}; limit: {limit}"))
        .with_context("lua failure: registration")
        .with_help("Reduce plugin registration metadata or split the plugin after review")
}

fn bounded_text(what: &str, value: &str, limit: usize) -> Result<(), OpError> {
    if value.trim().is_empty() {
        return Err(registration_error(format!("{what} must not be empty")));
    }
    if value.len() > limit {
        return Err(registration_limit(what, "bytes", value.len(), limit));
    }
    if has_terminal_controls(value) {
        return Err(registration_error(format!(
            "{what} contains forbidden terminal control bytes"
        )));
    }
    Ok(())
}

fn portable_name(what: &str, value: &str) -> Result<(), OpError> {
    if value.is_empty()
        || !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Err(registration_error(format!(
            "{what} `{value}` contains unsupported characters"
        )));
    }
    Ok(())
}

fn string_list(what: &str, values: &[String], count: usize, bytes: usize) -> Result<(), OpError> {
    if values.is_empty() {
        return Err(registration_error(format!("{what} must not be empty")));
    }
    if values.len() > count {
        return Err(registration_limit(what, "entries", values.len(), count));
    }
    values.iter().try_for_each(|v| bounded_text(what, v, bytes))
}

const VALUE_KINDS: &[&str] = &[
    "Nothing", "Bool", "Int", "UInt", "Decimal", "String", "List", "Record", "Path", "Duration",
    "Size", "DateTime", "Pattern",
];

/// Validate a prompt segment declaration.
pub fn check_prompt(r: &PromptRegistration) -> Result<(), OpError> {
    bounded_text("prompt segment name", &r.name, NAME_BYTES_MAX)?;
    if !(1..=PROMPT_DEADLINE_MS_MAX).contains(&r.deadline_ms) {
        return Err(registration_error(format!(
            "prompt segment `deadline_ms` must be between 1 and {PROMPT_DEADLINE_MS_MAX}"
        )));
    }
    Ok(())
}

/// Validate a completion provider declaration.
pub fn check_completion(r: &CompletionRegistration) -> Result<(), OpError> {
    bounded_text("completion provider command", &r.command, NAME_BYTES_MAX)
}

/// Validate a command declaration.
pub fn check_command(r: &CommandRegistration) -> Result<(), OpError> {
    bounded_text("plugin command name", &r.name, NAME_BYTES_MAX)?;
    for (field, value, limit) in [
        ("signature", &r.signature, DESCRIPTION_BYTES_MAX),
        ("summary", &r.summary, DESCRIPTION_BYTES_MAX),
        ("details", &r.details, DETAILS_BYTES_MAX),
        ("input_type", &r.input_type, TYPE_BYTES_MAX),
        ("output_type", &r.output_type, TYPE_BYTES_MAX),
    ] {
        bounded_text(&format!("plugin command {field}"), value, limit)?;
    }
    if !VALUE_KINDS.contains(&r.input_type.as_str()) {
        return Err(registration_error(format!(
            "plugin command input_type `{}` is unsupported; use `Nothing` or one exact structured value kind",
            r.input_type
        )));
    }
    let output_kind = r
        .output_type
        .strip_prefix("Values<")
        .and_then(|rest| rest.strip_suffix('>'))
        .unwrap_or(&r.output_type);
    if !VALUE_KINDS.contains(&output_kind) {
        return Err(registration_error(format!(
            "plugin command output_type `{}` is unsupported; use one exact value kind or bounded `Values<T>`, never `Stream<T>`",
            r.output_type
        )));
    }
    string_list(
        "plugin command examples",
        &r.examples,
        EXAMPLES_MAX,
        EXAMPLE_BYTES_MAX,
    )?;
    string_list(
        "plugin command effects",
        &r.effects,
        EFFECTS_MAX,
        EFFECT_BYTES_MAX,
    )?;
    if r.error_codes.is_empty() {
        return Err(registration_error(
            "plugin command error_codes must not be empty",
        ));
    }
    if r.error_codes.len() > ERROR_CODES_MAX {
        return Err(registration_limit(
            "plugin command error codes",
            "entries",
            r.error_codes.len(),
            ERROR_CODES_MAX,
        ));
    }
    for (code, description) in &r.error_codes {
        bounded_text("plugin command error code", code, ERROR_CODE_BYTES_MAX)?;
        bounded_text(
            "plugin command error description",
            description,
            ERROR_DESCRIPTION_BYTES_MAX,
        )?;
    }
    Ok(())
}

/// Validate an event handler declaration.
pub fn check_event(r: &EventSubscription) -> Result<(), OpError> {
    bounded_text("event handler name", &r.name, NAME_BYTES_MAX)?;
    portable_name("event handler name", &r.name)?;
    if r.events.is_empty() {
        return Err(registration_error(
            "event handler must subscribe to at least one event",
        ));
    }
    if !(1..=EXTENSION_DEADLINE_MS_MAX).contains(&r.deadline_ms) {
        return Err(registration_error(format!(
            "event handler deadline_ms must be between 1 and {EXTENSION_DEADLINE_MS_MAX}"
        )));
    }
    if r.events.iter().collect::<HashSet<_>>().len() != r.events.len() {
        return Err(registration_error(
            "event handler contains duplicate event kinds",
        ));
    }
    if !r.capabilities.contains(&Capability::EventsObserve) {
        return Err(registration_error(
            "event handler must declare the `events_observe` capability",
        ));
    }
    if r.capabilities.iter().collect::<HashSet<_>>().len() != r.capabilities.len() {
        return Err(registration_error(
            "event handler contains duplicate capabilities",
        ));
    }
    Ok(())
}

/// Validate a contribution declaration.
pub fn check_contribution(r: &ContributionRegistration) -> Result<(), OpError> {
    bounded_text("contribution name", &r.name, NAME_BYTES_MAX)?;
    portable_name("contribution name", &r.name)?;
    if let Some(fallback) = &r.plain_fallback {
        bounded_text("panel plain_fallback", fallback, PANEL_FALLBACK_BYTES_MAX)?;
    }
    if !(1..=EXTENSION_DEADLINE_MS_MAX).contains(&r.deadline_ms) {
        return Err(registration_error(format!(
            "contribution deadline_ms must be between 1 and {EXTENSION_DEADLINE_MS_MAX}"
        )));
    }
    if r.kind == ContributionKind::Panel && r.plain_fallback.as_deref().is_none_or(str::is_empty) {
        return Err(registration_error(
            "panel contributions require a non-empty plain_fallback",
        ));
    }
    Ok(())
}

/// Metadata bytes a registration retains (Quirl's accounting).
pub fn prompt_bytes(r: &PromptRegistration) -> usize {
    r.name.len()
}

/// See [`prompt_bytes`].
pub fn completion_bytes(r: &CompletionRegistration) -> usize {
    r.command.len()
}

/// See [`prompt_bytes`].
pub fn command_bytes(r: &CommandRegistration) -> usize {
    r.name.len()
        + r.signature.len()
        + r.summary.len()
        + r.details.len()
        + r.input_type.len()
        + r.output_type.len()
        + r.examples
            .iter()
            .chain(&r.effects)
            .map(String::len)
            .sum::<usize>()
        + r.error_codes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

/// See [`prompt_bytes`]. Quirl counts one byte per event kind and per
/// capability (their in-memory size).
pub fn event_bytes(r: &EventSubscription) -> usize {
    r.name.len() + r.events.len() + r.capabilities.len()
}

/// See [`prompt_bytes`].
pub fn contribution_bytes(r: &ContributionRegistration) -> usize {
    r.name.len() + r.plain_fallback.as_ref().map_or(0, String::len)
}

/// Check that one more registration of `added` bytes fits a collection of
/// `count` items retaining `bytes`.
pub fn check_addition(
    what: &str,
    count: usize,
    bytes: usize,
    added: usize,
    count_max: usize,
    bytes_max: usize,
) -> Result<(), OpError> {
    if count + 1 > count_max {
        return Err(registration_limit(
            what,
            "registrations",
            count + 1,
            count_max,
        ));
    }
    if bytes + added > bytes_max {
        return Err(registration_limit(what, "bytes", bytes + added, bytes_max));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn registrations_encode_with_sorted_keys_and_every_field() {
        let mut registrations = Registrations::default();
        registrations.contributions.push(ContributionRegistration {
            kind: ContributionKind::Catalog,
            name: "c".to_owned(),
            deadline_ms: 5,
            plain_fallback: None,
        });
        let text = serde_json::to_string(&registrations.to_json().unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"commands":[],"completion_providers":[],"contributions":[{"deadline_ms":5,"kind":"catalog","name":"c","plain_fallback":null}],"events":[],"prompt_segments":[]}"#
        );
    }

    #[test]
    fn panels_need_a_fallback() {
        let panel = ContributionRegistration {
            kind: ContributionKind::Panel,
            name: "p".to_owned(),
            deadline_ms: 5,
            plain_fallback: None,
        };
        assert!(check_contribution(&panel).is_err());
    }

    #[test]
    fn event_handlers_must_observe_and_not_repeat_kinds() {
        let mut handler = EventSubscription {
            name: "h".to_owned(),
            events: vec![EventKind::Output],
            capabilities: vec![Capability::EventsObserve],
            deadline_ms: 10,
        };
        assert!(check_event(&handler).is_ok());
        handler.events.push(EventKind::Output);
        assert!(check_event(&handler).is_err());
        handler.events.pop();
        handler.capabilities.clear();
        assert!(check_event(&handler).is_err());
    }
}
