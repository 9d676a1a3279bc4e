//! Profiles: what a case binds (SPEC.md §19).
//!
//! - `protocol`: every worker (or parent) — the MUSTs of the wire, the
//!   session, identity, framing, policy and of §15.1 / §16.1 / §17.1.
//! - `reference-sandbox`: the reference sandbox's own choices (which
//!   globals exist, coroutines, `collectgarbage`, finalizers, limits that
//!   retire the VM, native pattern functions). Another worker MAY differ.
//!
//! Independently, the tag `sdk` marks cases that need the Quirl Lua SDK,
//! and a case is *Lua-free* when a worker without Lua can pass it
//! (`worker::lua_free`); `--protocol-only` runs the Lua-free `protocol`
//! cases that are not tagged `sdk`.

use serde::{Deserialize, Serialize};

/// What a case binds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Binds every implementation (the default when a case names none).
    #[default]
    Protocol,
    /// A choice of the reference sandbox.
    ReferenceSandbox,
}

impl Profile {
    /// Every profile, in report order.
    pub const ALL: [Profile; 2] = [Profile::Protocol, Profile::ReferenceSandbox];

    /// The name used in case files, `--list` and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Protocol => "protocol",
            Profile::ReferenceSandbox => "reference-sandbox",
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
