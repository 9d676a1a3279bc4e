//! The resource policy carried by `initialize`.

use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Decode, Parser, Validate, decode_record};
use crate::limits::{POLICY_INSTRUCTIONS_MAX, POLICY_MEMORY_BYTES_MAX, POLICY_WALL_TIME_MS_MAX};
use serde::Serialize;

/// Resource and capability policy of a worker; always within range.
///
/// Ranges (inclusive): memory `1..=`[`POLICY_MEMORY_BYTES_MAX`] bytes,
/// instructions `1..=`[`POLICY_INSTRUCTIONS_MAX`], wall time
/// `1..=`[`POLICY_WALL_TIME_MS_MAX`] ms. [`Policy::new`] and the decoder
/// both reject values outside them (`policy_out_of_range`), so a `Policy`
/// value is always valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Policy {
    allow_process: bool,
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = POLICY_MEMORY_BYTES_MAX)))]
    memory_limit_bytes: u64,
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = POLICY_INSTRUCTIONS_MAX)))]
    instruction_limit: u64,
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = POLICY_WALL_TIME_MS_MAX)))]
    wall_time_ms: u64,
}

/// The members of a [`Policy`] by name, before their ranges are checked.
///
/// ```
/// use quirl_lua_protocol::records::{Policy, PolicySettings};
///
/// let policy = Policy::new(PolicySettings {
///     wall_time_ms: 1_000,
///     ..Policy::quirl_script_profile().settings()
/// })?;
/// assert_eq!(policy.wall_time_ms(), 1_000);
/// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicySettings {
    /// Whether guest code may be granted process access at all.
    pub allow_process: bool,
    /// Memory the VM allocator may retain: `1..=`[`POLICY_MEMORY_BYTES_MAX`].
    pub memory_limit_bytes: u64,
    /// Instruction budget per request: `1..=`[`POLICY_INSTRUCTIONS_MAX`].
    pub instruction_limit: u64,
    /// Wall-clock budget per request in ms: `1..=`[`POLICY_WALL_TIME_MS_MAX`].
    pub wall_time_ms: u64,
}

impl Policy {
    /// Validate the settings and build a policy (`policy_out_of_range` for
    /// a member outside its range).
    pub fn new(settings: PolicySettings) -> Result<Self, ProtocolError> {
        let PolicySettings {
            allow_process,
            memory_limit_bytes,
            instruction_limit,
            wall_time_ms,
        } = settings;
        check(
            "memory_limit_bytes",
            memory_limit_bytes,
            POLICY_MEMORY_BYTES_MAX,
        )?;
        check(
            "instruction_limit",
            instruction_limit,
            POLICY_INSTRUCTIONS_MAX,
        )?;
        check("wall_time_ms", wall_time_ms, POLICY_WALL_TIME_MS_MAX)?;
        Ok(Self {
            allow_process,
            memory_limit_bytes,
            instruction_limit,
            wall_time_ms,
        })
    }

    /// The members of this policy by name (always within range).
    pub const fn settings(&self) -> PolicySettings {
        PolicySettings {
            allow_process: self.allow_process,
            memory_limit_bytes: self.memory_limit_bytes,
            instruction_limit: self.instruction_limit,
            wall_time_ms: self.wall_time_ms,
        }
    }

    /// The profile Quirl 0.1 uses for user scripts (`run`, plugin
    /// commands): process access allowed, 8 MiB, 2,000,000 instructions,
    /// 250 ms. A convenient default, not part of the protocol: any policy
    /// in range is valid.
    pub const fn quirl_script_profile() -> Self {
        Self {
            allow_process: true,
            memory_limit_bytes: 8 * 1024 * 1024,
            instruction_limit: 2_000_000,
            wall_time_ms: 250,
        }
    }

    /// The stricter profile Quirl 0.1 uses for configuration and checks: no
    /// processes, 4 MiB, 500,000 instructions, 100 ms. Like
    /// [`Policy::quirl_script_profile`], a convenience, not a protocol rule.
    pub const fn quirl_config_profile() -> Self {
        Self {
            allow_process: false,
            memory_limit_bytes: 4 * 1024 * 1024,
            instruction_limit: 500_000,
            wall_time_ms: 100,
        }
    }

    /// Whether guest code may be granted process access.
    pub const fn allow_process(&self) -> bool {
        self.allow_process
    }

    /// Memory the VM allocator may retain, in bytes.
    pub const fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit_bytes
    }

    /// Approximate instruction budget per request.
    pub const fn instruction_limit(&self) -> u64 {
        self.instruction_limit
    }

    /// Wall-clock budget per request, in milliseconds.
    pub const fn wall_time_ms(&self) -> u64 {
        self.wall_time_ms
    }
}

fn check(field: &str, value: u64, max: u64) -> Result<(), ProtocolError> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(ProtocolError::new(
            ErrorKind::PolicyOutOfRange,
            format!("policy {field} is {value}; it must lie in 1..={max}"),
        )
        .at(field))
    }
}

/// The wire shape before range checks.
struct PolicyWire {
    allow_process: bool,
    memory_limit_bytes: u64,
    instruction_limit: u64,
    wall_time_ms: u64,
}

decode_record!(PolicyWire "policy" {
    allow_process: req,
    memory_limit_bytes: req,
    instruction_limit: req,
    wall_time_ms: req,
});

impl Validate for PolicyWire {}

impl Decode for Policy {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        let wire = PolicyWire::decode(parser)?;
        Policy::new(PolicySettings {
            allow_process: wire.allow_process,
            memory_limit_bytes: wire.memory_limit_bytes,
            instruction_limit: wire.instruction_limit,
            wall_time_ms: wire.wall_time_ms,
        })
    }
}
