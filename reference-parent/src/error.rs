//! The parent's error type: a class the caller can act on, and an error record.
//!
//! Every failure is an [`Error`] with an [`ErrorClass`] (what happened, and
//! so what the caller can do next; DESIGN §17.5 "error classes") and a v1
//! error record ([`ShellError`]: code, message, context, help) for people
//! and for JSON output. Codes follow SPEC §11.3:
//!
//! | class | code | [`limit`](Error::limit) | what happened to the worker |
//! |---|---|---|---|
//! | [`Guest`](ErrorClass::Guest) | the code in the worker's error response | — | nothing: it stays in use |
//! | [`Limit`](ErrorClass::Limit) | `resource_limit` | the kind the worker named | retired: its VM is never reused, the next call runs on a fresh worker |
//! | [`Deadline`](ErrorClass::Deadline) | `resource_limit` | `deadline` | killed and reaped; the next call runs on a fresh worker |
//! | [`Cancelled`](ErrorClass::Cancelled) | `resource_limit` | `cancellation` | killed and reaped; the next call runs on a fresh worker |
//! | [`ProtocolViolation`](ErrorClass::ProtocolViolation) | `validation` (`resource_limit` for an oversized frame) | — | killed and reaped; the next call runs on a fresh worker |
//! | [`WorkerCrashed`](ErrorClass::WorkerCrashed) | `lua` | — | it died; reaped; the next call runs on a fresh worker |
//! | [`Spawn`](ErrorClass::Spawn) | `process_spawn` (or the worker's code if it refused `initialize`) | — | none is running: what was started was killed and reaped; the next call tries again |
//! | [`InvalidInput`](ErrorClass::InvalidInput) | `validation` / `invalid_argument` | — | untouched: nothing was sent |
//! | [`Unavailable`](ErrorClass::Unavailable) | `lua` | — | none was used: the pool or plugin host was shut down |
//! | [`Quarantined`](ErrorClass::Quarantined) | `lua` | — | none was used: the restart budget is spent |
//! | [`Overloaded`](ErrorClass::Overloaded) | `resource_limit` | — | none was used: the pool's queue was full |
//!
//! This holds for every driver alike: the blocking [`Worker`](crate::Worker)
//! and the pools of [`lifecycle`](crate::lifecycle), and (feature `tokio`)
//! `tokio_worker::Worker` and `tokio_worker::WorkerPool`. No call is ever
//! sent into a worker that ended: the next call starts a fresh one (a pool
//! takes a warm spare when it has one). [`Error::worker_ended`] says
//! whether this error ended a worker; [`Error::limit`] which limit ended
//! the request, without parsing any text.
//!
//! Context entries are bounded so the record always stays within the v1
//! error-record bounds, however much cleanup has to report.

use std::fmt;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::ErrorKind as ProtocolErrorKind;
use quirl_lua_protocol::records::{ErrorCode, ShellError};

use crate::supervision::limit::LimitKind;
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
    /// The guest's code failed (a well-formed error response that names no
    /// tripped limit: a Lua error, a denied grant, a byte bound …). The
    /// worker stays in use.
    Guest,
    /// The guest tripped a resource limit inside the worker (instructions,
    /// memory, the worker's own wall time, host calls, cancellation; see
    /// [`Error::limit`]): the worker answered `resource_limit` and was
    /// retired, since a VM whose limit tripped is never reused (SPEC
    /// §13.1); the next call runs on a fresh worker.
    Limit,
    /// The request's absolute deadline passed; the worker was killed.
    Deadline,
    /// The request was cancelled; the worker was killed.
    Cancelled,
    /// The worker broke the protocol; it was killed.
    ProtocolViolation,
    /// The worker died, exited or closed its stream without answering.
    WorkerCrashed,
    /// The pool or plugin host was shut down; no worker was used.
    Unavailable,
    /// The worker could not be started, refused to initialize, or could
    /// not load its plugin again after a restart.
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
            Self::Limit => "limit",
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

    /// Whether an error of this class ends the worker that served it
    /// (killed, reaped or retired; see the module's table). A single error
    /// says it for itself: [`Error::worker_ended`].
    pub const fn ends_worker(self) -> bool {
        matches!(
            self,
            Self::Limit
                | Self::Deadline
                | Self::Cancelled
                | Self::ProtocolViolation
                | Self::WorkerCrashed
                | Self::Spawn
        )
    }

    /// Whether an error of this class is a worker failure that counts
    /// against a pool's restart budget (DESIGN §17.7): the worker died or
    /// was killed for a reason of its own (a deadline, a crash, a protocol
    /// violation) or could not be started. Guest errors, limit trips (a
    /// healthy worker that retired by design), cancellations by the host
    /// and refusals are not.
    pub const fn is_worker_failure(self) -> bool {
        matches!(
            self,
            Self::Deadline | Self::ProtocolViolation | Self::WorkerCrashed | Self::Spawn
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
    limit: Option<LimitKind>,
    worker_ended: bool,
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
        Self::from_record(class, ShellError::new(code, message))
    }

    /// An error of `class` around an existing record (a worker's answer).
    pub(crate) fn from_record(class: ErrorClass, record: ShellError) -> Self {
        Self {
            class,
            protocol_kind: None,
            limit: None,
            worker_ended: class.ends_worker(),
            record: Box::new(record),
        }
    }

    /// Rebuild an error of a different class around an existing record.
    pub(crate) fn with_class(mut self, class: ErrorClass) -> Self {
        self.class = class;
        self.worker_ended = class.ends_worker();
        self
    }

    pub(crate) fn with_limit(mut self, limit: LimitKind) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Say whether this error ended a worker, where the class alone does
    /// not tell (a pool refusing calls after its token fired is
    /// `Cancelled` but ended nothing).
    pub(crate) fn with_worker_ended(mut self, ended: bool) -> Self {
        self.worker_ended = ended;
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

    /// The limit that ended the request, if one did: the kind the worker
    /// named in its `resource_limit` answer ([`ErrorClass::Limit`], SPEC
    /// §11.4), [`LimitKind::Deadline`] for the parent's deadline and
    /// [`LimitKind::Cancellation`] for a cancellation.
    pub fn limit(&self) -> Option<LimitKind> {
        self.limit
    }

    /// Whether this error ended the worker that served it (killed and
    /// reaped, or retired after a tripped limit). The next call on the
    /// same handle or pool runs on a fresh worker either way.
    pub fn worker_ended(&self) -> bool {
        self.worker_ended
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
    fn the_classes_say_what_happened_to_the_worker() {
        assert!(!ErrorClass::Guest.ends_worker());
        assert!(!ErrorClass::InvalidInput.ends_worker());
        assert!(!ErrorClass::Quarantined.ends_worker());
        assert!(ErrorClass::Limit.ends_worker());
        assert!(ErrorClass::Deadline.ends_worker());
        assert!(ErrorClass::ProtocolViolation.ends_worker());
        // DESIGN §17.7: a limit trip and a cancellation are no failure.
        assert!(!ErrorClass::Limit.is_worker_failure());
        assert!(!ErrorClass::Cancelled.is_worker_failure());
        assert!(ErrorClass::WorkerCrashed.is_worker_failure());
        assert!(ErrorClass::Deadline.is_worker_failure());
        let refused = Error::new(ErrorClass::Cancelled, ErrorCode::ResourceLimit, "closed")
            .with_worker_ended(false);
        assert!(!refused.worker_ended());
    }
}
