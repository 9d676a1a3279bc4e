//! Extension records: the events handlers observe (SPEC §6.16), the actions
//! and reports they answer with, and the registrations a plugin makes
//! (`event` and `load_plugin` results, SPEC §7.2).
//!
//! - `event`: ExtensionEvent, its data and the event kinds (§6.16);
//! - `action`: ExtensionAction and EventHandlerReport (§7.2);
//! - `registration`: the registration records and PluginRegistrations (§7.2);
//! - `registration_bounds`: the registration bounds every `check` applies,
//!   and RegistrationError (§7.2).

mod action;
mod event;
mod registration;
mod registration_bounds;

pub use action::{EventHandlerReport, ExtensionAction};
pub use event::{EventKind, ExtensionEvent, ExtensionEventData, OutputStream};
pub use registration::{
    CommandRegistration, CompletionRegistration, ContributionKind, ContributionRegistration,
    EventSubscription, ExtensionCapability, PluginRegistrations, PromptRegistration,
};
pub use registration_bounds::RegistrationError;
