//! The typed error every process-host operation returns: a v1 error record
//! (SPEC §6.9) with one of the codes DESIGN §16.3 gives the host.
//!
//! [`HostError`] is a thin wrapper around the protocol's [`ShellError`], so
//! the record a guest receives is the one the host built — code, message,
//! context, help and exit status — with no second copy to keep in step. The
//! wrapper only narrows construction: the host creates its errors through
//! crate-private constructors with the codes of DESIGN §16.3
//! (`validation`, `invalid_argument`, `process_spawn`, `resource_limit`,
//! `io`).

use std::fmt;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, ShellError};

/// A process-host failure: a stable code, a one-line message, supporting
/// facts (`context`), recovery advice (`help`) and, when a child had already
/// exited, its status.
///
/// All text is short and bounded (well under the 64 items / 256 KiB limits of
/// the v1 error record, SPEC §6.9); the command source is never copied into
/// it. Boxed so a `Result` carrying it stays small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    record: Box<ShellError>,
}

/// `.with_context(…)` appends a line to the record's `context` (the
/// protocol crate's one builder, [`ErrorContext::with_context`]).
impl ErrorContext for HostError {
    fn append_context(&mut self, line: String) {
        self.record.append_context(line);
    }
}

impl HostError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            record: Box::new(ShellError::new(code, message)),
        }
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.record.help.push(help.into());
        self
    }

    pub(crate) fn with_exit_status(mut self, status: Option<i32>) -> Self {
        self.record.exit_status = status;
        self
    }

    pub(crate) fn io(message: impl Into<String>, error: &std::io::Error) -> Self {
        Self::new(ErrorCode::Io, message)
            .with_context(format!("operating-system error: {error}"))
            .with_help("Retry the call; report this if it persists")
    }

    /// The stable v1 error code.
    pub fn code(&self) -> ErrorCode {
        self.record.code
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        &self.record.message
    }

    /// Supporting facts, most relevant first.
    pub fn context(&self) -> &[String] {
        &self.record.context
    }

    /// Recovery advice, most relevant first.
    pub fn help(&self) -> &[String] {
        &self.record.help
    }

    /// The exit status of a child that ran to completion before the failure
    /// was decided (for example, output over its cap), using the same
    /// encoding as [`super::CommandOutcomeData::status`].
    pub fn exit_status(&self) -> Option<i32> {
        self.record.exit_status
    }

    /// The error record as the guest receives it.
    pub fn record(&self) -> &ShellError {
        &self.record
    }

    /// The error record, by value.
    pub fn into_record(self) -> ShellError {
        *self.record
    }
}

impl From<HostError> for ShellError {
    fn from(error: HostError) -> Self {
        error.into_record()
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.record, formatter)
    }
}

impl std::error::Error for HostError {}
