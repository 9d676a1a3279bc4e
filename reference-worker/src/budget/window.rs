//! The limits of a budget window (DESIGN §15.6): what one request, test
//! function or callback may spend, as `initialize`'s policy fixed it.
//!
//! Every window gets the policy's `instruction_limit` afresh and a wall
//! deadline: `wall_time_ms` for a request, or the callback's own deadline
//! (a prompt segment's `deadline_ms`, a completion provider's
//! `COMPLETION_DEADLINE`, a handler's or contribution's declared deadline,
//! the time a plugin command has left) capped by `wall_time_ms`. The
//! memory limit holds for the whole VM, the sandbox's own tables included,
//! and is never reset; a limit below what the sandbox itself holds is
//! refused before any guest code runs.

use super::Meter;
use crate::error::OpError;
use quirl_lua_protocol::records::Policy;
use std::time::Duration;

/// The budgets of every window of one VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    instruction_limit: u64,
    memory_limit_bytes: u64,
    wall_time: Duration,
}

impl Limits {
    /// The limits `policy` sets.
    pub fn from_policy(policy: &Policy) -> Self {
        Self {
            instruction_limit: policy.instruction_limit(),
            memory_limit_bytes: policy.memory_limit_bytes(),
            wall_time: Duration::from_millis(policy.wall_time_ms()),
        }
    }

    /// Instruction units per window.
    pub fn instruction_limit(&self) -> u64 {
        self.instruction_limit
    }

    /// Bytes the whole VM may hold.
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit_bytes
    }

    /// The wall deadline of a request, and the cap of every other window.
    pub fn wall_time(&self) -> Duration {
        self.wall_time
    }

    /// Open a window on `meter`: nothing charged, `instruction_limit`
    /// units, and a deadline of `wall` capped by the policy's wall time.
    pub fn begin(&self, meter: &Meter, wall: Duration) {
        meter.begin(self.instruction_limit, wall.min(self.wall_time));
    }

    /// Refuse a memory limit that the sandbox alone already fills:
    /// `baseline` is what the VM holds after it was built, before any guest
    /// code (DESIGN §15.6 "Memory").
    pub fn check_baseline(&self, baseline: u64) -> Result<(), OpError> {
        if baseline < self.memory_limit_bytes {
            return Ok(());
        }
        Err(
            OpError::resource_limit("memory_limit_bytes is smaller than the sandbox itself")
                .with_context("limit: memory")
                .with_context(format!(
                    "observed: {baseline} bytes before any guest code; limit: {} bytes",
                    self.memory_limit_bytes
                ))
                .with_help("Raise memory_limit_bytes"),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn limits(wall_ms: u64) -> Limits {
        Limits {
            instruction_limit: 1_000,
            memory_limit_bytes: 1 << 20,
            wall_time: Duration::from_millis(wall_ms),
        }
    }

    #[test]
    fn a_window_is_capped_by_the_policy_wall_time() {
        let limits = limits(50);
        let meter = Meter::new(1 << 20, 1_000, std::sync::Arc::default());
        let lua = mlua::Lua::new();
        meter.attach(&lua);
        limits.begin(&meter, Duration::from_secs(60));
        assert!(meter.remaining() <= Duration::from_millis(50));
        limits.begin(&meter, Duration::from_millis(5));
        assert!(meter.remaining() <= Duration::from_millis(5));
    }

    #[test]
    fn a_memory_limit_the_sandbox_fills_is_refused() {
        let limits = limits(50);
        assert!(limits.check_baseline((1 << 20) - 1).is_ok());
        let error = limits.check_baseline(1 << 20).unwrap_err();
        assert!(
            error.context.iter().any(|c| c == "limit: memory"),
            "{error:?}"
        );
    }
}
