//! Plugin registrations: the metadata a plugin declares through the SDK and
//! the callbacks behind it.
//!
//! The records are the protocol crate's (`PluginRegistrations` and its
//! members) and so are their rules: each registration passes its own
//! `check` and the plugin-wide `check_collections` (counts, bytes, unique
//! names; SPEC §7.2) before it is kept, so the `load_plugin` result is
//! always one the protocol accepts. The callbacks stay in the VM's
//! registry; only validated metadata leaves the worker.

use crate::error::OpError;
use mlua::RegistryKey;
use quirl_lua_protocol::records::{
    ContributionKind, EventKind, ExtensionCapability, PluginRegistrations, RegistrationError,
};
use std::collections::HashMap;
use std::time::Duration;

/// Quirl's display name of a contribution kind (`Debug` spelling of its enum).
pub const fn contribution_title(kind: ContributionKind) -> &'static str {
    match kind {
        ContributionKind::Catalog => "Catalog",
        ContributionKind::Completion => "Completion",
        ContributionKind::Panel => "Panel",
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
    pub capabilities: Vec<ExtensionCapability>,
}

/// Registrations plus their callbacks.
#[derive(Debug, Default)]
pub struct Registry {
    /// Declared metadata.
    pub registrations: PluginRegistrations,
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

    /// Keep one registration that passed its own check, if the plugin's
    /// registrations with it still pass the plugin-wide rules (counts,
    /// bytes, unique names); otherwise nothing changes. `list` selects the
    /// collection it belongs to.
    pub fn admit<T>(
        &mut self,
        item: T,
        list: fn(&mut PluginRegistrations) -> &mut Vec<T>,
    ) -> Result<(), OpError> {
        list(&mut self.registrations).push(item);
        if let Err(error) = self.registrations.check_collections() {
            list(&mut self.registrations).pop();
            return Err(refused(error));
        }
        Ok(())
    }
}

/// Registration failure (`validation`).
pub fn registration_error(message: impl Into<String>) -> OpError {
    OpError::validation("Lua registration failed validation")
        .with_context(message)
        .with_context("lua failure: registration")
        .with_help("Fix the registration before loading the plugin")
}

/// A registration the protocol's rules refuse: `resource_limit` when it
/// exceeds a count or byte bound, `validation` otherwise (DESIGN §15.11). The
/// context names the field and the bound or rule.
pub fn refused(error: RegistrationError) -> OpError {
    let mut detail = error.error.message().to_owned();
    if !error.error.context().is_empty() {
        detail = format!("{detail} (at `{}`)", error.error.context());
    }
    if error.exceeds_bound {
        OpError::resource_limit("Lua registration exceeds the configured registration limit")
            .with_context(detail)
            .with_context("lua failure: registration")
            .with_help("Reduce plugin registration metadata or split the plugin after review")
    } else {
        registration_error(detail)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::error::ErrorCode;
    use quirl_lua_protocol::limits::PROMPT_SEGMENTS_MAX;
    use quirl_lua_protocol::records::{
        ContributionRegistration, EventSubscription, PromptRegistration,
    };

    fn prompts(registrations: &mut PluginRegistrations) -> &mut Vec<PromptRegistration> {
        &mut registrations.prompt_segments
    }

    #[test]
    fn admit_keeps_registrations_within_the_protocols_collection_bounds() {
        let mut registry = Registry::default();
        for index in 0..PROMPT_SEGMENTS_MAX {
            let segment = PromptRegistration {
                name: format!("s{index}"),
                deadline_ms: 5,
            };
            registry.admit(segment, prompts).unwrap();
        }
        let extra = PromptRegistration {
            name: "extra".to_owned(),
            deadline_ms: 5,
        };
        let error = registry.admit(extra, prompts).unwrap_err();
        assert_eq!(error.code, ErrorCode::ResourceLimit);
        assert!(
            error.context[0].contains("at most 64"),
            "the bound is named: {error:?}"
        );
        assert_eq!(
            registry.registrations.prompt_segments.len(),
            PROMPT_SEGMENTS_MAX
        );
        registry.registrations.validate().unwrap();
        let duplicate = PromptRegistration {
            name: "s0".to_owned(),
            deadline_ms: 5,
        };
        registry.registrations.prompt_segments.pop();
        let error = registry.admit(duplicate, prompts).unwrap_err();
        assert_eq!(error.code, ErrorCode::Validation);
        assert!(error.context[0].contains("duplicate prompt segment `s0`"));
    }

    #[test]
    fn item_checks_are_the_protocols() {
        let panel = ContributionRegistration {
            kind: ContributionKind::Panel,
            name: "p".to_owned(),
            deadline_ms: 5,
            plain_fallback: None,
        };
        let error = refused(panel.check().unwrap_err());
        assert_eq!(error.code, ErrorCode::Validation);
        assert!(error.context[0].contains("plain_fallback"), "{error:?}");
        let mut handler = EventSubscription {
            name: "h".to_owned(),
            events: vec![EventKind::Output],
            capabilities: vec![ExtensionCapability::EventsObserve],
            deadline_ms: 10,
        };
        assert!(handler.check().is_ok());
        handler.events.push(EventKind::Output);
        assert!(handler.check().is_err());
        handler.events.pop();
        handler.capabilities.clear();
        assert!(handler.check().is_err());
        let long = PromptRegistration {
            name: "x".repeat(200),
            deadline_ms: 5,
        };
        let error = refused(long.check().unwrap_err());
        assert_eq!(error.code, ErrorCode::ResourceLimit);
        assert!(error.context[0].contains("at most 128"), "{error:?}");
    }

    #[test]
    fn contribution_kinds_have_quirls_titles() {
        assert_eq!(contribution_title(ContributionKind::Catalog), "Catalog");
    }
}
