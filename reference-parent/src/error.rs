//! The parent's error type: a class the caller can act on, and an error record.
//!
//! Every failure is an [`Error`] with an [`ErrorKind`] (what happened, and
//! so what the caller can do next) and a v1 error record
//! ([`ShellError`]: code, message, context, help) for people and for JSON
//! output. Codes follow SPEC.md §11.3:
//!
//! | kind | code | worker afterwards |
//! |---|---|---|
//! | [`Guest`](ErrorKind::Guest) | the code in the worker's error response | healthy, reusable |
//! | [`Deadline`](ErrorKind::Deadline), [`Cancelled`](ErrorKind::Cancelled) | `resource_limit` | killed, handle poisoned |
//! | [`ProtocolViolation`](ErrorKind::ProtocolViolation) | `validation` (`resource_limit` for an oversized frame) | killed, handle poisoned |
//! | [`WorkerCrashed`](ErrorKind::WorkerCrashed) | `lua` | reaped, handle poisoned |
//! | [`Unavailable`](ErrorKind::Unavailable) | `lua` | (already gone) |
//! | [`Spawn`](ErrorKind::Spawn) | `process_spawn` (or the worker's code if it refused `initialize`) | killed and reaped |
//! | [`InvalidInput`](ErrorKind::InvalidInput) | `validation` / `invalid_argument` | untouched: nothing was sent |
//! | [`Quarantined`](ErrorKind::Quarantined) | `lua` | none was used (restart budget spent) |
//! | [`Overloaded`](ErrorKind::Overloaded) | `resource_limit` | none was used (pool queue full) |
//!
//! Context entries are bounded so the record always stays within the v1
//! error-record bounds, however much cleanup has to report.

use std::fmt;

use quirl_lua_protocol::{ErrorCode, ErrorKind as ProtocolErrorKind, ShellError};

use quirl_lua_protocol::limits::{
    ERROR_ITEMS_MAX as ITEMS_MAX, ERROR_TEXT_BYTES_MAX as TEXT_BYTES_MAX,
};
/// Longest single context entry the parent adds.
const CONTEXT_ENTRY_BYTES_MAX: usize = 4 * 1024;

/// What went wrong, as far as the caller's next step is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The guest's code failed (a well-formed error response): Lua error,
    /// instruction or memory limit, … The worker stays usable.
    Guest,
    /// The request's absolute deadline passed; the worker was killed.
    Deadline,
    /// The request was cancelled; the worker was killed.
    Cancelled,
    /// The worker broke the protocol; it was killed.
    ProtocolViolation,
    /// The worker died, exited or closed its stream without answering.
    WorkerCrashed,
    /// The handle was poisoned by an earlier failure (or shut down).
    Unavailable,
    /// The worker could not be started or refused to initialize.
    Spawn,
    /// The caller's input was rejected before anything was sent.
    InvalidInput,
    /// The plugin or pool spent its restart budget and is quarantined until
    /// an explicit reset (the lifecycle module); no worker was used.
    Quarantined,
    /// Every pool member was busy and the bounded queue was full (or the
    /// wait for a member timed out); no worker was used.
    Overloaded,
}

impl ErrorKind {
    /// The stable snake_case name of this kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Guest => "guest",
            Self::Deadline => "deadline",
            Self::Cancelled => "cancelled",
            Self::ProtocolViolation => "protocol_violation",
            Self::WorkerCrashed => "worker_crashed",
            Self::Unavailable => "unavailable",
            Self::Spawn => "spawn",
            Self::InvalidInput => "invalid_input",
            Self::Quarantined => "quarantined",
            Self::Overloaded => "overloaded",
        }
    }

    /// Whether an error of this kind ended the worker and poisoned the handle.
    pub const fn poisons(self) -> bool {
        matches!(
            self,
            Self::Deadline
                | Self::Cancelled
                | Self::ProtocolViolation
                | Self::WorkerCrashed
                | Self::Unavailable
                | Self::Spawn
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed worker operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    protocol_kind: Option<ProtocolErrorKind>,
    record: Box<ShellError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            kind,
            protocol_kind: None,
            record: Box::new(ShellError::new(code, message)),
        }
    }

    /// A guest error carried by a well-formed error response.
    pub(crate) fn guest(record: ShellError) -> Self {
        Self {
            kind: ErrorKind::Guest,
            protocol_kind: None,
            record: Box::new(record),
        }
    }

    /// Rebuild an error of a different kind around an existing record.
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    pub(crate) fn with_protocol_kind(mut self, kind: ProtocolErrorKind) -> Self {
        self.protocol_kind = Some(kind);
        self
    }

    /// Append one context entry, keeping the record within its v1 bounds.
    #[must_use]
    /// Append a `containment: …` line to the context (SPEC §17.2), as the
    /// CLI does for `--json` errors.
    pub fn with_containment_context(self, line: impl Into<String>) -> Self {
        self.with_context(line)
    }

    pub(crate) fn with_context(mut self, context: impl Into<String>) -> Self {
        let mut entry: String = context.into();
        truncate_at_char(&mut entry, CONTEXT_ENTRY_BYTES_MAX);
        let used = text_bytes(&self.record);
        if self.record.context.len() < ITEMS_MAX && used + entry.len() <= TEXT_BYTES_MAX {
            self.record.context.push(entry);
        }
        self
    }

    /// Append one help entry, keeping the record within its v1 bounds.
    #[must_use]
    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        let mut entry: String = help.into();
        truncate_at_char(&mut entry, CONTEXT_ENTRY_BYTES_MAX);
        let used = text_bytes(&self.record);
        if self.record.help.len() < ITEMS_MAX && used + entry.len() <= TEXT_BYTES_MAX {
            self.record.help.push(entry);
        }
        self
    }

    /// The class of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The v1 error code of the record.
    pub fn code(&self) -> ErrorCode {
        self.record.code
    }

    /// The primary message.
    pub fn message(&self) -> &str {
        &self.record.message
    }

    /// The protocol sub-kind, when the failure was a protocol violation
    /// (`oversized_frame`, `identity_mismatch`, …).
    pub fn protocol_kind(&self) -> Option<ProtocolErrorKind> {
        self.protocol_kind
    }

    /// The full error record.
    pub fn record(&self) -> &ShellError {
        &self.record
    }

    /// Take the error record.
    pub fn into_record(self) -> ShellError {
        *self.record
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.record.code, self.record.message)?;
        for context in &self.record.context {
            write!(f, "; {context}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

fn text_bytes(record: &ShellError) -> usize {
    record.message.len()
        + record.context.iter().map(String::len).sum::<usize>()
        + record.help.iter().map(String::len).sum::<usize>()
        + record
            .labels
            .iter()
            .map(|label| label.message.len() + label.source.as_ref().map_or(0, String::len))
            .sum::<usize>()
        + record.command.as_ref().map_or(0, String::len)
}

fn truncate_at_char(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn context_stays_within_the_record_bounds() {
        let mut error = Error::new(ErrorKind::WorkerCrashed, ErrorCode::Lua, "worker died");
        for _ in 0..200 {
            error = error.with_context("x".repeat(10_000));
        }
        assert!(error.record().context.len() <= ITEMS_MAX);
        assert!(text_bytes(error.record()) <= TEXT_BYTES_MAX);
        assert!(
            error
                .record()
                .context
                .iter()
                .all(|c| c.len() <= CONTEXT_ENTRY_BYTES_MAX)
        );
    }

    #[test]
    fn display_shows_code_message_and_context() {
        let error = Error::new(ErrorKind::Deadline, ErrorCode::ResourceLimit, "too slow")
            .with_context("deadline 5 ms");
        assert_eq!(error.to_string(), "resource_limit: too slow; deadline 5 ms");
    }

    #[test]
    fn poisoning_kinds_are_the_supervision_failures() {
        assert!(!ErrorKind::Guest.poisons());
        assert!(!ErrorKind::InvalidInput.poisons());
        assert!(ErrorKind::Deadline.poisons());
        assert!(ErrorKind::ProtocolViolation.poisons());
    }
}
