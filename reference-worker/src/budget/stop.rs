//! How a stop becomes an error (DESIGN §15.8, §15.11): the sticky stop
//! record ([`Stop`]: a [`LimitTrip`] or a protocol violation during a host
//! call), the `resource_limit` error record each trip is answered with
//! (`limit: …` then `observed: …; limit: …`), and the value raised inside
//! Lua once a VM has stopped ([`StopSignal`]).

use crate::error::OpError;
use std::fmt;

/// Why a VM stopped. Set once, never cleared.
#[derive(Debug, Clone)]
pub enum Stop {
    /// A budget tripped; the worker answers with a `resource_limit` error
    /// and retires the VM.
    Limit(LimitTrip),
    /// The parent broke the protocol during a host call; the worker exits
    /// without answering.
    Violation(String),
}

/// Which budget tripped and what was observed.
#[derive(Debug, Clone)]
pub enum LimitTrip {
    /// Charged instruction units exceeded the limit.
    Instructions {
        /// Units charged when the check failed.
        charged: u64,
        /// The request's limit.
        limit: u64,
    },
    /// The wall-clock deadline passed.
    WallTime {
        /// Milliseconds since the request's budget was reset.
        elapsed_ms: u64,
        /// The request's deadline in milliseconds.
        limit_ms: u64,
    },
    /// The allocator refused memory because of the VM's limit.
    Memory {
        /// Bytes the refused allocation asked for.
        requested: u64,
        /// Bytes the VM held when it was refused.
        used: u64,
        /// The VM's memory limit.
        limit: u64,
    },
    /// The cancellation flag was set.
    Cancelled,
    /// `quirl.process.run` was called more often than the per-request host
    /// call budget allows (the call over budget never reaches the wire).
    HostCalls {
        /// The number of the refused call.
        observed: u32,
        /// Host calls allowed per request.
        limit: u32,
    },
    /// The parent answered a host call with a `resource_limit` error.
    Host(OpError),
}

impl LimitTrip {
    /// The `resource_limit` error record reported for this trip.
    pub fn to_error(&self) -> OpError {
        match self {
            Self::Instructions { charged, limit } => {
                OpError::resource_limit("Lua exceeded its configured instruction budget")
                    .with_context("limit: instructions")
                    .with_context(format!("observed: {charged} instructions; limit: {limit}"))
                    .with_help("Reduce Lua work or raise instruction_limit after review")
            }
            Self::WallTime {
                elapsed_ms,
                limit_ms,
            } => OpError::resource_limit("Lua exceeded its configured wall_time budget")
                .with_context("limit: wall_time")
                .with_context(format!("observed: {elapsed_ms} ms; limit: {limit_ms} ms"))
                .with_help("Reduce callback work or raise wall_time after review"),
            Self::Memory {
                requested,
                used,
                limit,
            } => OpError::resource_limit("Lua exceeded its configured memory budget")
                .with_context("limit: memory")
                .with_context(format!(
                    "observed: {used} bytes in use, {requested} more requested; limit: {limit} bytes"
                ))
                .with_help("Reduce retained Lua data or raise memory_limit_bytes after review"),
            Self::Cancelled => OpError::resource_limit("Lua execution was cancelled")
                .with_context("limit: cancellation")
                .with_context("observed: cancellation flag set")
                .with_help("Retry only after clearing the owning cancellation handle"),
            Self::HostCalls { observed, limit } => OpError::resource_limit(
                "quirl.process.run exceeded its per-request host call budget",
            )
            .with_context("limit: host_calls")
            .with_context(format!("observed: {observed} host calls; limit: {limit}"))
            .with_help("Run fewer processes per request"),
            Self::Host(error) => error.clone(),
        }
    }
}

/// The error value raised into Lua when a VM has stopped. Guest code never
/// sees anything it could use: every instruction after a stop raises it
/// again, and the worker's verdict comes from the [`Meter`](super::Meter), not from this
/// value.
#[derive(Debug, Clone, Copy)]
pub struct StopSignal;

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the sandbox stopped this request")
    }
}

impl std::error::Error for StopSignal {}

/// Convert a stop into the error raised inside Lua.
pub fn stop_error() -> mlua::Error {
    mlua::Error::external(StopSignal)
}
