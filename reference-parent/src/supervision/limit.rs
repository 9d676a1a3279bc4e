//! Which limit ended a request: [`LimitKind`], read once from the worker's
//! error record (SPEC §11.4) or set by the parent for its own deadline
//! and cancellation, so that no caller parses context lines.

use quirl_lua_protocol::records::{ErrorCode, ShellError};

/// The context entry that names a tripped limit in a `resource_limit`
/// record (SPEC §11.4): `limit: KIND`, optionally followed by `; …`.
const LIMIT_ENTRY_PREFIX: &str = "limit: ";

/// A resource limit that ended a request.
///
/// The first five are tripped inside the worker, which answers
/// `resource_limit` with a `limit: KIND` context entry (SPEC §11.4; the
/// error's class is [`Limit`](crate::ErrorClass::Limit)); the last two
/// are the parent's own ([`Deadline`](crate::ErrorClass::Deadline),
/// [`Cancelled`](crate::ErrorClass::Cancelled)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// The instruction budget (`instruction_limit`, SPEC §10).
    Instructions,
    /// The VM's memory limit (`memory_limit_bytes`).
    Memory,
    /// The worker's own clock: the request's `wall_time_ms`, or a
    /// callback's declared deadline.
    WallTime,
    /// More host calls than one request may make (SPEC §9.2).
    HostCalls,
    /// The request was cancelled: inside the worker (`limit:
    /// cancellation`), or by the parent's [`Cancel`](crate::Cancel).
    Cancellation,
    /// The parent's absolute deadline passed and it killed the worker
    /// (SPEC §10, §13.2).
    Deadline,
}

impl LimitKind {
    /// The stable snake_case name (the `KIND` of SPEC §11.4 for the
    /// worker's kinds; `deadline` for the parent's).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Instructions => "instructions",
            Self::Memory => "memory",
            Self::WallTime => "wall_time",
            Self::HostCalls => "host_calls",
            Self::Cancellation => "cancellation",
            Self::Deadline => "deadline",
        }
    }

    /// The limit a worker's `resource_limit` record names, if it names one
    /// of the kinds of SPEC §11.4: the first context entry `limit: KIND`
    /// (what follows a `;` is detail). `None` for another code, or a
    /// `resource_limit` record of a byte or count bound (registration
    /// bounds, an oversized result), which names no VM limit.
    pub fn from_record(record: &ShellError) -> Option<Self> {
        if record.code != ErrorCode::ResourceLimit {
            return None;
        }
        record.context.iter().find_map(|entry| {
            let named = entry.strip_prefix(LIMIT_ENTRY_PREFIX)?;
            let kind = named.split(';').next().unwrap_or_default().trim();
            Self::worker_kind(kind)
        })
    }

    fn worker_kind(name: &str) -> Option<Self> {
        Some(match name {
            "instructions" => Self::Instructions,
            "memory" => Self::Memory,
            "wall_time" => Self::WallTime,
            "host_calls" => Self::HostCalls,
            "cancellation" => Self::Cancellation,
            _ => return None,
        })
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn record(code: ErrorCode, context: &[&str]) -> ShellError {
        let mut record = ShellError::new(code, "stopped");
        for entry in context {
            record = record.with_context(*entry);
        }
        record
    }

    // SPEC §11.4: the first `limit: KIND` entry names the limit.
    #[test]
    fn the_limit_entry_names_the_kind() {
        for (entry, kind) in [
            ("limit: instructions", LimitKind::Instructions),
            ("limit: memory", LimitKind::Memory),
            ("limit: wall_time", LimitKind::WallTime),
            ("limit: host_calls", LimitKind::HostCalls),
            ("limit: cancellation", LimitKind::Cancellation),
            ("limit: memory; observed: 40 MiB", LimitKind::Memory),
        ] {
            let found = LimitKind::from_record(&record(
                ErrorCode::ResourceLimit,
                &["lua failure: runtime", entry, "observed: 1; limit: 1"],
            ));
            assert_eq!(found, Some(kind), "{entry}");
        }
    }

    #[test]
    fn records_that_name_no_vm_limit_have_no_kind() {
        // A byte bound (the runner's `limit: 8388608; observed: …`), another
        // code, no entry at all, the parent's own kind spelled by a worker.
        for (code, context) in [
            (
                ErrorCode::ResourceLimit,
                vec!["limit: 8388608; observed: 9000000"],
            ),
            (ErrorCode::Lua, vec!["limit: instructions"]),
            (ErrorCode::ResourceLimit, vec![]),
            (ErrorCode::ResourceLimit, vec!["limit: deadline"]),
            (ErrorCode::ResourceLimit, vec!["the limit: instructions"]),
        ] {
            assert_eq!(
                LimitKind::from_record(&record(code, &context)),
                None,
                "{code:?} {context:?}"
            );
        }
    }

    #[test]
    fn names_are_stable() {
        assert_eq!(LimitKind::WallTime.to_string(), "wall_time");
        assert_eq!(LimitKind::Deadline.as_str(), "deadline");
    }
}
