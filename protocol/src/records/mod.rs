//! Every wire record of `quirl.lua-worker@1`.
//!
//! Records serialize (serde) in Quirl's field order and decode through the
//! crate's strict JSON extraction; decoding also runs each record's
//! domain checks. Free-form values are [`serde_json::Value`]s.
//!
//! Every record also decodes from a host's own JSON (text, bytes or a
//! `serde_json::Value`) by the wire decoder's rules: see [`StrictDecode`].
//! The records live here only (the crate root re-exports none of them, so
//! they never clash with a host's own `ShellError` or `ErrorCode`):
//! `use quirl_lua_protocol::records::{Operation, Policy};`.
//!
//! With the feature `arbitrary`, every record implements
//! `arbitrary::Arbitrary`, generating values within the protocol's bounds
//! (each encodes, and decodes back equal): a host fuzzes its own code with
//! them. `OperationResult::arbitrary_for` gives a result of one
//! operation.

#[cfg(feature = "arbitrary")]
mod arbitrary;
mod check_report;
mod config;
mod envelope;
mod execution;
mod extension;
mod policy;
pub(crate) mod results;
mod shell_error;
mod strict;

pub use check_report::{
    CHECK_DIAGNOSTICS_GRANT, CHECK_RULE_BYTES_MAX, CheckDiagnostic, CheckReport, Severity,
};
pub use config::{
    CompletionConfig, EditorConfig, PickerConfig, PromptConfig, QuirlConfig, StatuslineConfig,
    ThemeColors, UiConfig,
};
pub(crate) use envelope::check_call_id;
pub use envelope::{
    HostCall, HostResponse, Operation, OperationKind, ParentFrame, Request, Response, WorkerFrame,
};
pub use execution::{
    CleanupState, CommandOutcome, ExecutionContext, ExecutionEffects, ExecutionInput,
    ExecutionOutcome, ExecutionOutput, ExecutionStatus, OutputTarget, StructuredValue,
};
pub use extension::{
    CommandRegistration, CompletionRegistration, ContributionKind, ContributionRegistration,
    EventHandlerReport, EventKind, EventSubscription, ExtensionAction, ExtensionCapability,
    ExtensionEvent, ExtensionEventData, OutputStream, PluginRegistrations, PromptRegistration,
    RegistrationError,
};
pub use policy::{Policy, PolicySettings};
pub use results::OperationResult;
pub use shell_error::{ErrorCode, ErrorLabel, ShellError};
pub use strict::StrictDecode;
