//! Plugin registrations (SPEC §7.2, `load_plugin` result): the prompt
//! segment, completion provider, command, event handler and contribution
//! records, and PluginRegistrations holding them. Their bounds are checked in
//! `registration_bounds`.

use super::event::EventKind;
use crate::error::ProtocolError;
use crate::json::{Validate, decode_record, string_enum};
use serde::Serialize;
use std::collections::BTreeMap;

/// The surface a contribution extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum ContributionKind {
    /// Command catalog metadata.
    Catalog,
    /// Completion candidates.
    Completion,
    /// A user-interface panel.
    Panel,
}

string_enum!(ContributionKind "contribution kind" {
    "catalog" => Catalog,
    "completion" => Completion,
    "panel" => Panel,
});

/// An authority an extension handler may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum ExtensionCapability {
    /// Observe events, diagnose, annotate.
    EventsObserve,
    /// Rewrite plans.
    PlanRewrite,
    /// Mutate the environment.
    EnvironmentMutate,
    /// Read output content.
    OutputRead,
    /// Block executions.
    ExecutionBlock,
    /// Contribute catalog metadata.
    CatalogContribute,
    /// Contribute completions.
    CompletionContribute,
    /// Provide UI panels.
    UiPanel,
}

string_enum!(ExtensionCapability "extension capability" {
    "events_observe" => EventsObserve,
    "plan_rewrite" => PlanRewrite,
    "environment_mutate" => EnvironmentMutate,
    "output_read" => OutputRead,
    "execution_block" => ExecutionBlock,
    "catalog_contribute" => CatalogContribute,
    "completion_contribute" => CompletionContribute,
    "ui_panel" => UiPanel,
});

/// A prompt segment callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PromptRegistration {
    /// Name.
    pub name: String,
    /// Per-render deadline (1..=[`PROMPT_DEADLINE_MS_MAX`](crate::limits::PROMPT_DEADLINE_MS_MAX) ms).
    pub deadline_ms: u64,
}
decode_record!(PromptRegistration "prompt registration" { name: req, deadline_ms: req });
impl Validate for PromptRegistration {}

/// A completion provider for one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CompletionRegistration {
    /// Command path.
    pub command: String,
}
decode_record!(CompletionRegistration "completion registration" { command: req });
impl Validate for CompletionRegistration {}

/// A command implemented by a plugin callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CommandRegistration {
    /// Command path.
    pub name: String,
    /// Invocation syntax.
    pub signature: String,
    /// Short description.
    pub summary: String,
    /// Documentation.
    pub details: String,
    /// Input contract (`Nothing` or a value kind).
    pub input_type: String,
    /// Output contract (a value kind or `Values<kind>`).
    pub output_type: String,
    /// Examples.
    pub examples: Vec<String>,
    /// Effects.
    pub effects: Vec<String>,
    /// Error code names and meanings.
    pub error_codes: BTreeMap<String, String>,
}
decode_record!(CommandRegistration "command registration" {
    name: req,
    signature: req,
    summary: req,
    details: req,
    input_type: req,
    output_type: req,
    examples: req,
    effects: req,
    error_codes: req,
});
impl Validate for CommandRegistration {}

/// An event handler declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EventSubscription {
    /// Handler name.
    pub name: String,
    /// Events delivered (non-empty, unique).
    pub events: Vec<EventKind>,
    /// Declared capabilities (must include `events_observe`).
    pub capabilities: Vec<ExtensionCapability>,
    /// Per-callback deadline (1..=[`EXTENSION_DEADLINE_MS_MAX`](crate::limits::EXTENSION_DEADLINE_MS_MAX) ms).
    pub deadline_ms: u64,
}
decode_record!(EventSubscription "event subscription" {
    name: req,
    events: req,
    capabilities: req,
    deadline_ms: req,
});
impl Validate for EventSubscription {}

/// A named contribution declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ContributionRegistration {
    /// Surface.
    pub kind: ContributionKind,
    /// Name.
    pub name: String,
    /// Per-callback deadline (1..=[`EXTENSION_DEADLINE_MS_MAX`](crate::limits::EXTENSION_DEADLINE_MS_MAX) ms).
    pub deadline_ms: u64,
    /// Plain-text fallback (required for panels; `null` when absent).
    pub plain_fallback: Option<String>,
}
decode_record!(ContributionRegistration "contribution registration" {
    kind: req,
    name: req,
    deadline_ms: req,
    plain_fallback: req,
});
impl Validate for ContributionRegistration {}

/// Declarations made while loading a plugin (`load_plugin` result).
///
/// Decoding repeats all of Quirl's registration bounds (`domain_bounds`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PluginRegistrations {
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
decode_record!(PluginRegistrations "plugin registrations" {
    prompt_segments: req,
    completion_providers: req,
    commands: req,
    events: req,
    contributions: req,
});

impl Validate for PluginRegistrations {
    fn validate(&self) -> Result<(), ProtocolError> {
        PluginRegistrations::validate(self)
    }
}
