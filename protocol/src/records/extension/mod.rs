//! Extension records: events, actions, handler reports and plugin registrations.

use super::ShellError;
use crate::error::ProtocolError;
use crate::json::{Validate, decode_record, decode_tagged, string_enum};
use crate::limits::{
    COMMAND_DETAILS_BYTES_MAX, COMMAND_EFFECT_BYTES_MAX, COMMAND_EFFECTS_MAX,
    COMMAND_ERROR_CODE_BYTES_MAX, COMMAND_ERROR_CODES_MAX, COMMAND_ERROR_DESCRIPTION_BYTES_MAX,
    COMMAND_EXAMPLE_BYTES_MAX, COMMAND_EXAMPLES_MAX, COMMAND_TYPE_BYTES_MAX,
    COMPLETION_PROVIDER_BYTES_MAX, COMPLETION_PROVIDERS_MAX, CONTRIBUTION_BYTES_MAX,
    CONTRIBUTIONS_MAX, EVENT_ACTIONS_MAX, EVENT_HANDLER_BYTES_MAX, EVENT_HANDLERS_MAX,
    EXTENSION_DEADLINE_MS_MAX, EXTENSION_PROTOCOL_VERSION, PANEL_BYTES_MAX,
    PANEL_FALLBACK_BYTES_MAX, PANELS_MAX, PLUGIN_COMMAND_BYTES_MAX, PLUGIN_COMMANDS_MAX,
    PROMPT_DEADLINE_MS_MAX, PROMPT_SEGMENT_BYTES_MAX, PROMPT_SEGMENTS_MAX,
    REGISTRATION_DESCRIPTION_BYTES_MAX, REGISTRATION_NAME_BYTES_MAX,
};
use crate::value::{check_terminal_safe, has_terminal_controls};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};

/// An observation delivered to extension handlers (`event` operation).
///
/// `protocol_version` must be [`EXTENSION_PROTOCOL_VERSION`] (2): Quirl's
/// worker runtime refuses any other, so the codec does too
/// (`domain_bounds`) and a parent never sends one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExtensionEvent {
    /// The extension event protocol version: always [`EXTENSION_PROTOCOL_VERSION`].
    #[cfg_attr(feature = "schema", schemars(range(min = EXTENSION_PROTOCOL_VERSION, max = EXTENSION_PROTOCOL_VERSION)))]
    pub protocol_version: u32,
    /// Sequence number within the producing session.
    pub sequence: u64,
    /// Payload.
    pub data: ExtensionEventData,
}

decode_record!(ExtensionEvent "extension event" {
    protocol_version: req,
    sequence: req,
    data: req,
});

impl Validate for ExtensionEvent {
    fn validate(&self) -> Result<(), ProtocolError> {
        if self.protocol_version != EXTENSION_PROTOCOL_VERSION {
            return Err(ProtocolError::domain(format!(
                "extension event protocol version {} is not supported; only {EXTENSION_PROTOCOL_VERSION} is",
                self.protocol_version
            ))
            .at("protocol_version"));
        }
        Ok(())
    }
}

/// The payload of an [`ExtensionEvent`], tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExtensionEventData {
    /// A session is ready.
    SessionStart {
        /// Whether persisted state was restored.
        restored: bool,
    },
    /// A persisted session was restored.
    SessionRestore {
        /// Its identifier.
        session_id: String,
    },
    /// The working directory changed.
    DirectoryChanged {
        /// Before.
        previous: String,
        /// After.
        current: String,
    },
    /// A command plan is ready.
    CommandPlan {
        /// The command source.
        source: String,
        /// Declared effect names.
        effects: Vec<String>,
    },
    /// Progress of an execution.
    ExecutionProgress {
        /// Completed units.
        completed: u64,
        /// Total units, when known (`null` otherwise).
        total: Option<u64>,
        /// Description (`null` when absent).
        message: Option<String>,
    },
    /// Process output metadata; `text` is omitted when absent.
    Output {
        /// The stream.
        stream: OutputStream,
        /// Raw bytes represented.
        bytes: u64,
        /// Decoded text, when exposed.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Cancellation was requested or observed.
    Cancellation {
        /// Why.
        reason: String,
    },
    /// A command completed.
    Result {
        /// Exit status.
        status: i32,
        /// Duration in milliseconds.
        duration_ms: u64,
    },
    /// A structured failure.
    Error {
        /// The error record.
        error: ShellError,
    },
}

decode_tagged!(ExtensionEventData "extension event data", tag = "kind" {
    "session_start" => SessionStart { restored: req },
    "session_restore" => SessionRestore { session_id: req },
    "directory_changed" => DirectoryChanged { previous: req, current: req },
    "command_plan" => CommandPlan { source: req, effects: req },
    "execution_progress" => ExecutionProgress { completed: req, total: req, message: req },
    "output" => Output { stream: req, bytes: req, text: omit },
    "cancellation" => Cancellation { reason: req },
    "result" => Result { status: req, duration_ms: req },
    "error" => Error { error: req },
});
impl Validate for ExtensionEventData {}

impl ExtensionEventData {
    /// The event category of this payload (what handlers subscribe to).
    pub const fn kind(&self) -> EventKind {
        match self {
            ExtensionEventData::SessionStart { .. } => EventKind::SessionStart,
            ExtensionEventData::SessionRestore { .. } => EventKind::SessionRestore,
            ExtensionEventData::DirectoryChanged { .. } => EventKind::DirectoryChanged,
            ExtensionEventData::CommandPlan { .. } => EventKind::CommandPlan,
            ExtensionEventData::ExecutionProgress { .. } => EventKind::ExecutionProgress,
            ExtensionEventData::Output { .. } => EventKind::Output,
            ExtensionEventData::Cancellation { .. } => EventKind::Cancellation,
            ExtensionEventData::Result { .. } => EventKind::Result,
            ExtensionEventData::Error { .. } => EventKind::Error,
        }
    }
}

/// Which process stream produced output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

string_enum!(OutputStream "output stream" {
    "stdout" => Stdout,
    "stderr" => Stderr,
});

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

/// An event category a handler subscribes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `session_start`.
    SessionStart,
    /// `session_restore`.
    SessionRestore,
    /// `directory_changed`.
    DirectoryChanged,
    /// `command_plan`.
    CommandPlan,
    /// `execution_progress`.
    ExecutionProgress,
    /// `output`.
    Output,
    /// `cancellation`.
    Cancellation,
    /// `result`.
    Result,
    /// `error`.
    Error,
}

string_enum!(EventKind "event kind" {
    "session_start" => SessionStart,
    "session_restore" => SessionRestore,
    "directory_changed" => DirectoryChanged,
    "command_plan" => CommandPlan,
    "execution_progress" => ExecutionProgress,
    "output" => Output,
    "cancellation" => Cancellation,
    "result" => Result,
    "error" => Error,
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

/// A prompt segment callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PromptRegistration {
    /// Name.
    pub name: String,
    /// Per-render deadline (1..=[`PROMPT_DEADLINE_MS_MAX`] ms).
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
    /// Per-callback deadline (1..=[`EXTENSION_DEADLINE_MS_MAX`] ms).
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
    /// Per-callback deadline (1..=[`EXTENSION_DEADLINE_MS_MAX`] ms).
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

/// Why a registration is refused: the protocol error (`domain_bounds`, with
/// its path) and whether a count or byte bound was exceeded.
///
/// The registration checks are public so that a worker building
/// registrations (from a plugin's SDK calls) applies exactly the rules the
/// codec applies to a `load_plugin` result. Quirl reports a registration
/// over a count or byte bound as `resource_limit` and every other refusal as
/// `validation`; [`RegistrationError::exceeds_bound`] tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationError {
    /// The failure, naming the field and the rule or bound it broke.
    pub error: ProtocolError,
    /// Whether a count or byte bound was exceeded (rather than a shape rule broken).
    pub exceeds_bound: bool,
}

impl RegistrationError {
    fn at(self, field: &str) -> Self {
        Self {
            error: self.error.at(field),
            ..self
        }
    }

    fn at_index(self, index: usize) -> Self {
        Self {
            error: self.error.at_index(index),
            ..self
        }
    }
}

impl std::fmt::Display for RegistrationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for RegistrationError {}

fn reg_error(message: impl Into<String>) -> RegistrationError {
    RegistrationError {
        error: ProtocolError::domain(message),
        exceeds_bound: false,
    }
}

fn bound_error(message: impl Into<String>) -> RegistrationError {
    RegistrationError {
        error: ProtocolError::domain(message),
        exceeds_bound: true,
    }
}

fn bounded_text(what: &str, value: &str, max: usize) -> Result<(), RegistrationError> {
    if value.trim().is_empty() {
        return Err(reg_error(format!("{what} must not be empty")));
    }
    if value.len() > max {
        return Err(bound_error(format!(
            "{what} has {} bytes; at most {max} are allowed",
            value.len()
        )));
    }
    if has_terminal_controls(value) {
        return Err(reg_error(format!(
            "{what} contains terminal control characters"
        )));
    }
    Ok(())
}

fn portable_name(what: &str, value: &str) -> Result<(), RegistrationError> {
    if value.is_empty()
        || !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Err(reg_error(format!(
            "{what} `{value}` must use ASCII letters, digits, `.`, `_`, `-` or `/`"
        )));
    }
    Ok(())
}

fn deadline(what: &str, deadline_ms: u64, max: u64) -> Result<(), RegistrationError> {
    if (1..=max).contains(&deadline_ms) {
        Ok(())
    } else {
        Err(reg_error(format!(
            "{what} deadline_ms is {deadline_ms}; it must lie in 1..={max}"
        ))
        .at("deadline_ms"))
    }
}

fn collection(
    what: &str,
    count: usize,
    bytes: impl Iterator<Item = usize>,
    count_max: usize,
    bytes_max: usize,
) -> Result<(), RegistrationError> {
    if count > count_max {
        return Err(bound_error(format!(
            "{count} {what}; at most {count_max} are allowed"
        )));
    }
    let total = bytes.fold(0_usize, usize::saturating_add);
    if total > bytes_max {
        return Err(bound_error(format!(
            "{what} hold {total} bytes; at most {bytes_max} are allowed"
        )));
    }
    Ok(())
}

fn unique<'a>(what: &str, names: impl Iterator<Item = &'a str>) -> Result<(), RegistrationError> {
    let mut seen = HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(reg_error(format!("duplicate {what} `{name}`")));
        }
    }
    Ok(())
}

const VALUE_KINDS: &[&str] = &[
    "Nothing", "Bool", "Int", "UInt", "Decimal", "String", "List", "Record", "Path", "Duration",
    "Size", "DateTime", "Pattern",
];

fn input_contract_ok(value: &str) -> bool {
    VALUE_KINDS.contains(&value)
}

fn output_contract_ok(value: &str) -> bool {
    match value
        .strip_prefix("Values<")
        .and_then(|inner| inner.strip_suffix('>'))
    {
        Some(inner) => VALUE_KINDS.contains(&inner),
        None => VALUE_KINDS.contains(&value),
    }
}

fn string_list(
    what: &str,
    values: &[String],
    count_max: usize,
    item_max: usize,
) -> Result<(), RegistrationError> {
    if values.is_empty() {
        return Err(reg_error(format!("{what} must not be empty")));
    }
    if values.len() > count_max {
        return Err(bound_error(format!(
            "{} {what}; at most {count_max} are allowed",
            values.len()
        )));
    }
    values
        .iter()
        .try_for_each(|value| bounded_text(what, value, item_max))
}

impl PromptRegistration {
    /// Bytes this registration counts against [`PROMPT_SEGMENT_BYTES_MAX`].
    pub fn metadata_bytes(&self) -> usize {
        self.name.len()
    }

    /// Check this prompt segment on its own: a non-empty, terminal-safe name
    /// of at most [`REGISTRATION_NAME_BYTES_MAX`] bytes and a deadline in
    /// `1..=`[`PROMPT_DEADLINE_MS_MAX`].
    pub fn check(&self) -> Result<(), RegistrationError> {
        bounded_text(
            "prompt segment name",
            &self.name,
            REGISTRATION_NAME_BYTES_MAX,
        )
        .map_err(|e| e.at("name"))?;
        deadline("prompt segment", self.deadline_ms, PROMPT_DEADLINE_MS_MAX)
    }
}

impl CompletionRegistration {
    /// Bytes this registration counts against [`COMPLETION_PROVIDER_BYTES_MAX`].
    pub fn metadata_bytes(&self) -> usize {
        self.command.len()
    }

    /// Check this provider on its own: a non-empty, terminal-safe command of
    /// at most [`REGISTRATION_NAME_BYTES_MAX`] bytes.
    pub fn check(&self) -> Result<(), RegistrationError> {
        bounded_text(
            "completion provider command",
            &self.command,
            REGISTRATION_NAME_BYTES_MAX,
        )
        .map_err(|e| e.at("command"))
    }
}

impl CommandRegistration {
    /// Bytes this registration counts against [`PLUGIN_COMMAND_BYTES_MAX`]:
    /// every text, error code names and descriptions included.
    pub fn metadata_bytes(&self) -> usize {
        [
            self.name.len(),
            self.signature.len(),
            self.summary.len(),
            self.details.len(),
            self.input_type.len(),
            self.output_type.len(),
        ]
        .into_iter()
        .chain(self.examples.iter().chain(&self.effects).map(String::len))
        .chain(
            self.error_codes
                .iter()
                .map(|(code, text)| code.len().saturating_add(text.len())),
        )
        .fold(0_usize, usize::saturating_add)
    }

    /// Check this command on its own (the text bounds of SPEC §7.2, the
    /// input and output contracts, the example, effect and error code lists).
    pub fn check(&self) -> Result<(), RegistrationError> {
        for (field, value, max) in [
            ("name", &self.name, REGISTRATION_NAME_BYTES_MAX),
            (
                "signature",
                &self.signature,
                REGISTRATION_DESCRIPTION_BYTES_MAX,
            ),
            ("summary", &self.summary, REGISTRATION_DESCRIPTION_BYTES_MAX),
            ("details", &self.details, COMMAND_DETAILS_BYTES_MAX),
            ("input_type", &self.input_type, COMMAND_TYPE_BYTES_MAX),
            ("output_type", &self.output_type, COMMAND_TYPE_BYTES_MAX),
        ] {
            bounded_text(&format!("command {field}"), value, max).map_err(|e| e.at(field))?;
        }
        if !input_contract_ok(&self.input_type) {
            return Err(reg_error(format!(
                "command input_type `{}` is not `Nothing` or a value kind",
                self.input_type
            ))
            .at("input_type"));
        }
        if !output_contract_ok(&self.output_type) {
            return Err(reg_error(format!(
                "command output_type `{}` is not a value kind or `Values<kind>`",
                self.output_type
            ))
            .at("output_type"));
        }
        string_list(
            "command examples",
            &self.examples,
            COMMAND_EXAMPLES_MAX,
            COMMAND_EXAMPLE_BYTES_MAX,
        )
        .map_err(|e| e.at("examples"))?;
        string_list(
            "command effects",
            &self.effects,
            COMMAND_EFFECTS_MAX,
            COMMAND_EFFECT_BYTES_MAX,
        )
        .map_err(|e| e.at("effects"))?;
        if self.error_codes.is_empty() {
            return Err(reg_error("command error_codes must not be empty").at("error_codes"));
        }
        if self.error_codes.len() > COMMAND_ERROR_CODES_MAX {
            return Err(bound_error(format!(
                "{} command error codes; at most {COMMAND_ERROR_CODES_MAX} are allowed",
                self.error_codes.len()
            ))
            .at("error_codes"));
        }
        for (code, text) in &self.error_codes {
            bounded_text("command error code", code, COMMAND_ERROR_CODE_BYTES_MAX)
                .and_then(|()| {
                    bounded_text(
                        "command error description",
                        text,
                        COMMAND_ERROR_DESCRIPTION_BYTES_MAX,
                    )
                })
                .map_err(|e| e.at(code).at("error_codes"))?;
        }
        Ok(())
    }
}

impl EventSubscription {
    /// Bytes this registration counts against [`EVENT_HANDLER_BYTES_MAX`]
    /// (Quirl counts one byte per event kind and per capability).
    pub fn metadata_bytes(&self) -> usize {
        self.name
            .len()
            .saturating_add(self.events.len())
            .saturating_add(self.capabilities.len())
    }

    /// Check this handler on its own: a portable name, at least one event
    /// and no repeated one, `events_observe` among its capabilities and none
    /// repeated, a deadline in `1..=`[`EXTENSION_DEADLINE_MS_MAX`].
    pub fn check(&self) -> Result<(), RegistrationError> {
        bounded_text(
            "event handler name",
            &self.name,
            REGISTRATION_NAME_BYTES_MAX,
        )
        .and_then(|()| portable_name("event handler name", &self.name))
        .map_err(|e| e.at("name"))?;
        if self.events.is_empty() {
            return Err(
                reg_error("event handler must subscribe to at least one event").at("events"),
            );
        }
        deadline("event handler", self.deadline_ms, EXTENSION_DEADLINE_MS_MAX)?;
        if self.events.len() > EventKind::ALL.len()
            || self.events.iter().collect::<HashSet<_>>().len() != self.events.len()
        {
            return Err(reg_error("event handler lists an event kind twice").at("events"));
        }
        if self.capabilities.len() > ExtensionCapability::ALL.len()
            || self.capabilities.iter().collect::<HashSet<_>>().len() != self.capabilities.len()
        {
            return Err(reg_error("event handler lists a capability twice").at("capabilities"));
        }
        if !self
            .capabilities
            .contains(&ExtensionCapability::EventsObserve)
        {
            return Err(reg_error("event handler must declare `events_observe`").at("capabilities"));
        }
        Ok(())
    }
}

impl ContributionRegistration {
    /// Bytes this registration counts against [`CONTRIBUTION_BYTES_MAX`]
    /// (and, for panels, [`PANEL_BYTES_MAX`]).
    pub fn metadata_bytes(&self) -> usize {
        self.name
            .len()
            .saturating_add(self.plain_fallback.as_ref().map_or(0, String::len))
    }

    /// Check this contribution on its own: a portable name, a bounded
    /// terminal-safe fallback (required for panels), a deadline in
    /// `1..=`[`EXTENSION_DEADLINE_MS_MAX`].
    pub fn check(&self) -> Result<(), RegistrationError> {
        bounded_text("contribution name", &self.name, REGISTRATION_NAME_BYTES_MAX)
            .and_then(|()| portable_name("contribution name", &self.name))
            .map_err(|e| e.at("name"))?;
        if let Some(fallback) = &self.plain_fallback {
            bounded_text("panel plain_fallback", fallback, PANEL_FALLBACK_BYTES_MAX)
                .map_err(|e| e.at("plain_fallback"))?;
        }
        deadline("contribution", self.deadline_ms, EXTENSION_DEADLINE_MS_MAX)?;
        if self.kind == ContributionKind::Panel
            && self.plain_fallback.as_deref().is_none_or(str::is_empty)
        {
            return Err(
                reg_error("panel contributions require a non-empty plain_fallback")
                    .at("plain_fallback"),
            );
        }
        Ok(())
    }
}

impl PluginRegistrations {
    /// Check every registration bound Quirl checks (`domain_bounds`).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        self.check().map_err(|e| e.error)
    }

    /// [`PluginRegistrations::validate`], telling bound failures apart
    /// (see [`RegistrationError`]): [`check_collections`](Self::check_collections),
    /// then each registration's own [`check`](CommandRegistration::check).
    pub fn check(&self) -> Result<(), RegistrationError> {
        self.check_collections()?;
        for (index, item) in self.prompt_segments.iter().enumerate() {
            item.check()
                .map_err(|e| e.at_index(index).at("prompt_segments"))?;
        }
        for (index, item) in self.completion_providers.iter().enumerate() {
            item.check()
                .map_err(|e| e.at_index(index).at("completion_providers"))?;
        }
        for (index, item) in self.commands.iter().enumerate() {
            item.check().map_err(|e| e.at_index(index).at("commands"))?;
        }
        for (index, item) in self.events.iter().enumerate() {
            item.check().map_err(|e| e.at_index(index).at("events"))?;
        }
        for (index, item) in self.contributions.iter().enumerate() {
            item.check()
                .map_err(|e| e.at_index(index).at("contributions"))?;
        }
        Ok(())
    }

    /// The plugin-wide rules only: the count and byte bounds of each
    /// collection (panels included) and unique names (contributions: unique
    /// `(kind, name)`). A worker that checked each registration on its own
    /// when it was made calls this after adding one, at a cost linear in the
    /// number of registrations rather than in their text.
    pub fn check_collections(&self) -> Result<(), RegistrationError> {
        collection(
            "prompt segments",
            self.prompt_segments.len(),
            self.prompt_segments
                .iter()
                .map(PromptRegistration::metadata_bytes),
            PROMPT_SEGMENTS_MAX,
            PROMPT_SEGMENT_BYTES_MAX,
        )
        .map_err(|e| e.at("prompt_segments"))?;
        collection(
            "completion providers",
            self.completion_providers.len(),
            self.completion_providers
                .iter()
                .map(CompletionRegistration::metadata_bytes),
            COMPLETION_PROVIDERS_MAX,
            COMPLETION_PROVIDER_BYTES_MAX,
        )
        .map_err(|e| e.at("completion_providers"))?;
        collection(
            "plugin commands",
            self.commands.len(),
            self.commands
                .iter()
                .map(CommandRegistration::metadata_bytes),
            PLUGIN_COMMANDS_MAX,
            PLUGIN_COMMAND_BYTES_MAX,
        )
        .map_err(|e| e.at("commands"))?;
        collection(
            "event handlers",
            self.events.len(),
            self.events.iter().map(EventSubscription::metadata_bytes),
            EVENT_HANDLERS_MAX,
            EVENT_HANDLER_BYTES_MAX,
        )
        .map_err(|e| e.at("events"))?;
        collection(
            "contributions",
            self.contributions.len(),
            self.contributions
                .iter()
                .map(ContributionRegistration::metadata_bytes),
            CONTRIBUTIONS_MAX,
            CONTRIBUTION_BYTES_MAX,
        )
        .map_err(|e| e.at("contributions"))?;
        let panels: Vec<_> = self
            .contributions
            .iter()
            .filter(|item| item.kind == ContributionKind::Panel)
            .collect();
        collection(
            "panel contributions",
            panels.len(),
            panels.iter().map(|item| item.metadata_bytes()),
            PANELS_MAX,
            PANEL_BYTES_MAX,
        )
        .map_err(|e| e.at("contributions"))?;
        unique(
            "prompt segment",
            self.prompt_segments.iter().map(|i| i.name.as_str()),
        )
        .map_err(|e| e.at("prompt_segments"))?;
        unique(
            "completion provider",
            self.completion_providers.iter().map(|i| i.command.as_str()),
        )
        .map_err(|e| e.at("completion_providers"))?;
        unique(
            "plugin command",
            self.commands.iter().map(|i| i.name.as_str()),
        )
        .map_err(|e| e.at("commands"))?;
        unique("event handler", self.events.iter().map(|i| i.name.as_str()))
            .map_err(|e| e.at("events"))?;
        let mut contributions = HashSet::new();
        for (index, item) in self.contributions.iter().enumerate() {
            if !contributions.insert((item.kind, item.name.as_str())) {
                return Err(reg_error(format!(
                    "duplicate {} contribution `{}`",
                    item.kind.as_str(),
                    item.name
                ))
                .at_index(index)
                .at("contributions"));
            }
        }
        Ok(())
    }
}
