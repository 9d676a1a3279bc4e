//! The parent's error type: a class the caller can act on, and an error record.
//!
//! Every failure is an [`Error`] with an [`ErrorClass`] (what happened, and
//! so what the caller can do next; DESIGN §17.5 "error classes") and a v1
//! error record ([`ShellError`]: code, message, context, help) for people
//! and for JSON output. Codes follow SPEC §11.3:
//!
//! | class | code | worker afterwards |
//! |---|---|---|
//! | [`Guest`](ErrorClass::Guest) | the code in the worker's error response | healthy, reusable |
//! | [`Deadline`](ErrorClass::Deadline), [`Cancelled`](ErrorClass::Cancelled) | `resource_limit` | killed, handle poisoned |
//! | [`ProtocolViolation`](ErrorClass::ProtocolViolation) | `validation` (`resource_limit` for an oversized frame) | killed, handle poisoned |
//! | [`WorkerCrashed`](ErrorClass::WorkerCrashed) | `lua` | reaped, handle poisoned |
//! | [`Unavailable`](ErrorClass::Unavailable) | `lua` | (already gone) |
//! | [`Spawn`](ErrorClass::Spawn) | `process_spawn` (or the worker's code if it refused `initialize`) | killed and reaped |
//! | [`InvalidInput`](ErrorClass::InvalidInput) | `validation` / `invalid_argument` | untouched: nothing was sent |
//! | [`Quarantined`](ErrorClass::Quarantined) | `lua` | none was used (restart budget spent) |
//! | [`Overloaded`](ErrorClass::Overloaded) | `resource_limit` | none was used (pool queue full) |
//!
//! Context entries are bounded so the record always stays within the v1
//! error-record bounds, however much cleanup has to report.

use std::fmt;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::ErrorKind as ProtocolErrorKind;
use quirl_lua_protocol::records::{ErrorCode, ShellError};

use quirl_lua_protocol::limits::{
    ERROR_ITEMS_MAX as ITEMS_MAX, ERROR_TEXT_BYTES_MAX as TEXT_BYTES_MAX,
};
/// Longest single context entry the parent adds.
const CONTEXT_ENTRY_BYTES_MAX: usize = 4 * 1024;

/// What went wrong, as far as the caller's next step is concerned: the
/// error classes of DESIGN §17.5. (Not the protocol's `ErrorKind`, which names
/// the sub-kind of a protocol error, SPEC §11.2; see
/// [`Error::protocol_kind`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
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

impl ErrorClass {
    /// The stable snake_case name of this class.
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

    /// Whether an error of this class ended the worker and poisoned the handle.
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

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed worker operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    class: ErrorClass,
    protocol_kind: Option<ProtocolErrorKind>,
    record: Box<ShellError>,
}

/// `.with_context(…)` (the protocol crate's one builder,
/// [`ErrorContext::with_context`]) appends one entry, keeping the record
/// within its v1 bounds (SPEC §6.9): an entry is cut to 4 KiB, and one
/// that would pass the item or text bound is dropped; the entries already
/// there are never touched.
impl ErrorContext for Error {
    fn append_context(&mut self, line: String) {
        let mut entry = line;
        truncate_at_char(&mut entry, CONTEXT_ENTRY_BYTES_MAX);
        let used = self.record.text_bytes();
        if self.record.context.len() < ITEMS_MAX && used + entry.len() <= TEXT_BYTES_MAX {
            self.record.append_context(entry);
        }
    }
}

impl Error {
    pub(crate) fn new(class: ErrorClass, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            class,
            protocol_kind: None,
            record: Box::new(ShellError::new(code, message)),
        }
    }

    /// A guest error carried by a well-formed error response.
    pub(crate) fn guest(record: ShellError) -> Self {
        Self {
            class: ErrorClass::Guest,
            protocol_kind: None,
            record: Box::new(record),
        }
    }

    /// Rebuild an error of a different class around an existing record.
    pub(crate) fn with_class(mut self, class: ErrorClass) -> Self {
        self.class = class;
        self
    }

    pub(crate) fn with_protocol_kind(mut self, kind: ProtocolErrorKind) -> Self {
        self.protocol_kind = Some(kind);
        self
    }

    /// Append a `containment: …` line to the context (DESIGN §17.2), as the
    /// CLI does for `--json` errors.
    #[must_use]
    pub fn with_containment_context(self, line: impl Into<String>) -> Self {
        self.with_context(line)
    }

    /// Append one help entry, keeping the record within its v1 bounds.
    #[must_use]
    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        let mut entry: String = help.into();
        truncate_at_char(&mut entry, CONTEXT_ENTRY_BYTES_MAX);
        let used = self.record.text_bytes();
        if self.record.help.len() < ITEMS_MAX && used + entry.len() <= TEXT_BYTES_MAX {
            self.record.help.push(entry);
        }
        self
    }

    /// The class of failure (DESIGN §17.5).
    pub fn class(&self) -> ErrorClass {
        self.class
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

    // SPEC §6.9: the bounds drop later entries, never the first one.
    #[test]
    fn context_stays_within_the_record_bounds() {
        let mut error = Error::new(ErrorClass::WorkerCrashed, ErrorCode::Lua, "worker died")
            .with_context("worker 7 was killed by signal 9 (SIGKILL)");
        for _ in 0..200 {
            error = error.with_context("x".repeat(10_000));
        }
        assert_eq!(
            error.record().context[0],
            "worker 7 was killed by signal 9 (SIGKILL)"
        );
        assert!(error.record().context.len() <= ITEMS_MAX);
        assert!(error.record().text_bytes() <= TEXT_BYTES_MAX);
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
        let error = Error::new(ErrorClass::Deadline, ErrorCode::ResourceLimit, "too slow")
            .with_context("deadline 5 ms");
        assert_eq!(error.to_string(), "resource_limit: too slow; deadline 5 ms");
    }

    #[test]
    fn poisoning_classes_are_the_supervision_failures() {
        assert!(!ErrorClass::Guest.poisons());
        assert!(!ErrorClass::InvalidInput.poisons());
        assert!(ErrorClass::Deadline.poisons());
        assert!(ErrorClass::ProtocolViolation.poisons());
    }
}
