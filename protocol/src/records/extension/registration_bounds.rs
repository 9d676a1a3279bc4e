//! The registration bounds of SPEC §7.2 (PluginRegistrations): the text and
//! portable-name rules, each registration's own `check`, the plugin-wide
//! count, byte and uniqueness rules, and [`RegistrationError`], which tells
//! a bound exceeded from a shape rule broken.

use super::event::EventKind;
use super::registration::{
    CommandRegistration, CompletionRegistration, ContributionKind, ContributionRegistration,
    EventSubscription, ExtensionCapability, PluginRegistrations, PromptRegistration,
};
use crate::error::ProtocolError;
use crate::limits::{
    COMMAND_DETAILS_BYTES_MAX, COMMAND_EFFECT_BYTES_MAX, COMMAND_EFFECTS_MAX,
    COMMAND_ERROR_CODE_BYTES_MAX, COMMAND_ERROR_CODES_MAX, COMMAND_ERROR_DESCRIPTION_BYTES_MAX,
    COMMAND_EXAMPLE_BYTES_MAX, COMMAND_EXAMPLES_MAX, COMMAND_TYPE_BYTES_MAX,
    COMPLETION_PROVIDER_BYTES_MAX, COMPLETION_PROVIDERS_MAX, CONTRIBUTION_BYTES_MAX,
    CONTRIBUTIONS_MAX, EVENT_HANDLER_BYTES_MAX, EVENT_HANDLERS_MAX, EXTENSION_DEADLINE_MS_MAX,
    PANEL_BYTES_MAX, PANEL_FALLBACK_BYTES_MAX, PANELS_MAX, PLUGIN_COMMAND_BYTES_MAX,
    PLUGIN_COMMANDS_MAX, PROMPT_DEADLINE_MS_MAX, PROMPT_SEGMENT_BYTES_MAX, PROMPT_SEGMENTS_MAX,
    REGISTRATION_DESCRIPTION_BYTES_MAX, REGISTRATION_NAME_BYTES_MAX,
};
use crate::value::has_terminal_controls;
use std::collections::HashSet;

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

pub(super) fn bounded_text(what: &str, value: &str, max: usize) -> Result<(), RegistrationError> {
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

pub(super) fn portable_name(what: &str, value: &str) -> Result<(), RegistrationError> {
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
        self.check_contracts()?;
        self.check_lists()?;
        self.check_error_codes()
    }

    /// `input_type` is a value kind (or `Nothing`); `output_type` a value
    /// kind or `Values<kind>`.
    fn check_contracts(&self) -> Result<(), RegistrationError> {
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
        Ok(())
    }

    /// The example and effect lists: 1 to their count bound, each a bounded text.
    fn check_lists(&self) -> Result<(), RegistrationError> {
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
        .map_err(|e| e.at("effects"))
    }

    /// The error codes: 1 to [`COMMAND_ERROR_CODES_MAX`] entries, each code
    /// and description a bounded text.
    fn check_error_codes(&self) -> Result<(), RegistrationError> {
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
        self.check_collection_sizes()?;
        self.check_unique_names()
    }

    /// The count and byte bounds of each collection, panels included.
    fn check_collection_sizes(&self) -> Result<(), RegistrationError> {
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
        .map_err(|e| e.at("contributions"))
    }

    /// Unique names per collection; contributions are unique by `(kind, name)`.
    fn check_unique_names(&self) -> Result<(), RegistrationError> {
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
