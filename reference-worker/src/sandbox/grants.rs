//! Capability grants (SPEC §7.1, DESIGN §15.3, §15.9): which grant strings
//! `initialize` gave the VM, Quirl's defaults when it gave none, and what
//! each SDK function and extension capability needs.
//!
//! A registration function of the SDK needs its grant (`prompt.register`,
//! `completion.register`, `commands.register`, `events.observe`,
//! `extension.contribute`), an event subscription also the grant of every
//! capability it asks for, a contribution the grant of its kind;
//! `quirl.process.run` needs `allow_process` and `process.spawn` or a
//! scoped `process.spawn:<program>`. The worker capabilities of the sandbox
//! (`lua.load`, `lua.os`, `lua.io`: `super::capabilities`) are never
//! default grants; they change the globals the sandbox keeps
//! (`super::build_with`). [`KNOWN_GRANTS`] lists every grant string the
//! reference worker knows.

use crate::error::OpError;
use quirl_lua_protocol::records::{ContributionKind, ExtensionCapability};
use std::collections::HashSet;

pub use super::capabilities::LUA_LOAD_GRANT;
use super::capabilities::{LUA_IO_GRANT, LUA_OS_GRANT};

/// The prefix of a scoped process grant, `process.spawn:<program>`.
pub const SCOPED_PROCESS_GRANT_PREFIX: &str = "process.spawn:";

/// Every grant string the reference worker knows (SPEC §7.1), besides the
/// scoped `process.spawn:<program>` ([`is_known_grant`]): the SDK's
/// registration grants, the grants of extension capabilities, process
/// access and the sandbox's capabilities. The worker ignores any other
/// string it is granted.
pub const KNOWN_GRANTS: &[&str] = &[
    "catalog.register",
    // The protocol's own: `check` answers with its report (SPEC §7.2).
    quirl_lua_protocol::records::CHECK_DIAGNOSTICS_GRANT,
    "commands.register",
    "completion.register",
    "environment.mutate",
    "events.observe",
    "execution.block",
    "extension.contribute",
    LUA_IO_GRANT,
    LUA_LOAD_GRANT,
    LUA_OS_GRANT,
    "output.read",
    "plan.rewrite",
    "process.spawn",
    "prompt.register",
    "ui.panel",
];

/// Whether the reference worker knows the grant string `grant`: one of
/// [`KNOWN_GRANTS`], or `process.spawn:<program>` with a program name (no
/// whitespace).
pub fn is_known_grant(grant: &str) -> bool {
    if KNOWN_GRANTS.contains(&grant) {
        return true;
    }
    grant
        .strip_prefix(SCOPED_PROCESS_GRANT_PREFIX)
        .is_some_and(|program| !program.is_empty() && !program.chars().any(char::is_whitespace))
}

/// Capabilities fixed at initialize.
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// Policy switch for process access.
    pub allow_process: bool,
    /// Whether the parent offers a process host at all.
    pub process_enabled: bool,
    /// Granted capability strings.
    pub grants: HashSet<String>,
}

/// Quirl's default grants when initialize carries none.
pub fn default_grants(allow_process: bool) -> HashSet<String> {
    let mut grants: HashSet<String> = [
        "prompt.register",
        "completion.register",
        "commands.register",
        "events.observe",
        "extension.contribute",
        "catalog.register",
        "ui.panel",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    if allow_process {
        grants.insert("process.spawn".to_owned());
    }
    grants
}

impl Capabilities {
    /// Fail with `capability denied: <capability>` unless it was granted.
    pub fn require(&self, capability: &str) -> mlua::Result<()> {
        if self.grants.contains(capability) {
            Ok(())
        } else {
            Err(grant_denied(capability))
        }
    }
}

/// Quirl's scoped process grants: `process.spawn` allows any command;
/// `process.spawn:<program>` allows a single-line command of a small
/// character set whose first word is `<program>`.
pub fn process_granted(grants: &HashSet<String>, command: &str) -> bool {
    if grants.contains("process.spawn") {
        return true;
    }
    if command.is_empty() || command.trim() != command || command.chars().any(char::is_control) {
        return false;
    }
    if !command
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == ' ' || "-_./:=,@%+".contains(c))
    {
        return false;
    }
    let program = command.split_whitespace().next().unwrap_or_default();
    grants.contains(&format!("{SCOPED_PROCESS_GRANT_PREFIX}{program}"))
}

/// The grant string that authorizes a handler capability (Quirl's names).
pub const fn capability_grant(capability: ExtensionCapability) -> &'static str {
    match capability {
        ExtensionCapability::EventsObserve => "events.observe",
        ExtensionCapability::PlanRewrite => "plan.rewrite",
        ExtensionCapability::EnvironmentMutate => "environment.mutate",
        ExtensionCapability::OutputRead => "output.read",
        ExtensionCapability::ExecutionBlock => "execution.block",
        ExtensionCapability::CatalogContribute => "catalog.register",
        ExtensionCapability::CompletionContribute => "completion.register",
        ExtensionCapability::UiPanel => "ui.panel",
    }
}

/// The grant string that authorizes contributions of `kind`.
pub const fn contribution_grant(kind: ContributionKind) -> &'static str {
    match kind {
        ContributionKind::Catalog => "catalog.register",
        ContributionKind::Completion => "completion.register",
        ContributionKind::Panel => "ui.panel",
    }
}

fn grant_denied(capability: &str) -> mlua::Error {
    mlua::Error::external(
        OpError::validation(format!("capability denied: {capability}"))
            .with_context("lua failure: registration")
            .with_help("Grant only the capability approved by the plugin policy"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn scoped_process_grants_allow_one_simple_program() {
        let grants: HashSet<String> = ["process.spawn:git".to_owned()].into();
        assert!(process_granted(&grants, "git status --short"));
        assert!(!process_granted(&grants, "git status; rm -rf /"));
        assert!(!process_granted(&grants, "gitx status"));
        assert!(!process_granted(&grants, " git status"));
        assert!(!process_granted(&grants, "git\tstatus"));
        assert!(process_granted(&default_grants(true), "anything | at all"));
        assert!(!process_granted(&default_grants(false), "ls"));
    }

    #[test]
    fn grants_cover_every_capability_and_kind() {
        for capability in ExtensionCapability::ALL {
            assert!(!capability_grant(*capability).is_empty());
        }
        assert_eq!(contribution_grant(ContributionKind::Panel), "ui.panel");
    }

    #[test]
    fn known_grants_cover_every_grant_the_worker_checks() {
        assert!(KNOWN_GRANTS.is_sorted());
        for capability in ExtensionCapability::ALL {
            assert!(KNOWN_GRANTS.contains(&capability_grant(*capability)));
        }
        for kind in [
            ContributionKind::Catalog,
            ContributionKind::Completion,
            ContributionKind::Panel,
        ] {
            assert!(KNOWN_GRANTS.contains(&contribution_grant(kind)));
        }
        for grant in default_grants(true) {
            assert!(is_known_grant(&grant), "{grant}");
        }
        for capability in super::super::SANDBOX_CAPABILITIES {
            assert!(is_known_grant(capability.grant));
        }
        assert!(is_known_grant("process.spawn:git"));
        for unknown in [
            "lua.laod",
            "bogus",
            "process.spawn:",
            "process.spawn:a b",
            "lua",
        ] {
            assert!(!is_known_grant(unknown), "{unknown}");
        }
    }

    #[test]
    fn a_missing_grant_is_denied_by_name() {
        let capabilities = Capabilities {
            allow_process: false,
            process_enabled: false,
            grants: default_grants(false),
        };
        assert!(capabilities.require("prompt.register").is_ok());
        assert!(!default_grants(false).contains(LUA_LOAD_GRANT));
        let denied = capabilities.require(LUA_LOAD_GRANT).unwrap_err();
        assert!(
            denied.to_string().contains("capability denied: lua.load"),
            "{denied}"
        );
    }
}
