//! The typed error every process-host operation returns.
//!
//! [`HostError`] deliberately mirrors the v1 error record (code, message,
//! context, help, exit status) without depending on the protocol crate, so
//! the host can be tested on its own and converted at the edge.

use std::fmt;

/// Stable category of a process-host failure.
///
/// Each variant names the v1 `ErrorCode` it is reported as; the strings from
/// [`HostErrorCode::as_str`] are the snake_case wire spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostErrorCode {
    /// The command is not in the supported command language (a rejected
    /// form, an unterminated quote, an empty command, a NUL byte, over 1 MiB),
    /// or a configuration value is malformed.
    InvalidArgument,
    /// A deadline, cancellation, or output bound ended the command.
    ResourceLimit,
    /// The program could not be found or started.
    ProcessSpawn,
    /// An operating-system call of the host itself failed.
    Io,
    /// The grants deny the call (capability denied).
    Validation,
}

impl HostErrorCode {
    /// The snake_case spelling used on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::ResourceLimit => "resource_limit",
            Self::ProcessSpawn => "process_spawn",
            Self::Io => "io",
            Self::Validation => "validation",
        }
    }
}

impl fmt::Display for HostErrorCode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A process-host failure: a stable code, a one-line message, supporting
/// facts (`context`), recovery advice (`help`) and, when a child had already
/// exited, its status.
///
/// All text is short and bounded (well under the 64 items / 256 KiB limits of
/// the v1 error record); the command source is never copied into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    code: HostErrorCode,
    message: String,
    context: Vec<String>,
    help: Vec<String>,
    exit_status: Option<i32>,
}

impl HostError {
    pub(crate) fn new(code: HostErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            context: Vec::new(),
            help: Vec::new(),
            exit_status: None,
        }
    }

    pub(crate) fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context.push(context.into());
        self
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    pub(crate) fn with_exit_status(mut self, status: Option<i32>) -> Self {
        self.exit_status = status;
        self
    }

    pub(crate) fn io(message: impl Into<String>, error: &std::io::Error) -> Self {
        Self::new(HostErrorCode::Io, message)
            .with_context(format!("operating-system error: {error}"))
            .with_help("Retry the call; report this if it persists")
    }

    /// The stable category.
    pub fn code(&self) -> HostErrorCode {
        self.code
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Supporting facts, most relevant first.
    pub fn context(&self) -> &[String] {
        &self.context
    }

    /// Recovery advice, most relevant first.
    pub fn help(&self) -> &[String] {
        &self.help
    }

    /// The exit status of a child that ran to completion before the failure
    /// was decided (for example, output over its cap), using the same
    /// encoding as [`super::CommandOutcomeData::status`].
    pub fn exit_status(&self) -> Option<i32> {
        self.exit_status
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {}
