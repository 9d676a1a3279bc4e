//! Extension events (SPEC §6.16): the observation the `event` operation
//! delivers to handlers, its data tagged by `kind`, and the event kinds
//! handlers subscribe to.

use crate::error::ProtocolError;
use crate::json::{Validate, decode_record, decode_tagged, string_enum};
use crate::limits::EXTENSION_PROTOCOL_VERSION;
use crate::records::ShellError;
use serde::Serialize;

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
