//! The Landlock domain every host command gets, whatever its grant (DESIGN
//! §16.6 "Writes", §16.7 "Signals"): it may write — create, remove,
//! rename, link, truncate, write to — only beneath its writable roots (its
//! working directory unless that is `/`, its private directory, and what
//! the configuration adds) and to the null devices; every other file is
//! read-only to it. It cannot signal, or connect to an abstract UNIX socket
//! of, any process outside its own domain (Landlock ABI 6 scopes) — so not
//! the parent, the worker or another command.
//!
//! Built in the parent for each command (its private directory is new each
//! time) with the `landlock` crate, best effort by kernel: the rights an
//! older kernel lacks are left out and [`write_confinement_summary`] says
//! which. The child enters it with one `landlock_restrict_self`; a command
//! granted by name is restricted further by its execute ruleset
//! (`exec_ruleset`), a second layer.

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

/// The newest rights asked for: every write right up to ABI 4 (device
/// `ioctl`s, ABI 5, are not writes and stay allowed), the scopes of ABI 6.
const WRITE_ABI: ABI = ABI::V4;
const SCOPE_ABI: ABI = ABI::V6;

/// Device files every command may write to (what `> /dev/null` is for).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The write rights.
fn write_rights() -> BitFlags<AccessFs> {
    AccessFs::from_write(WRITE_ABI)
}

/// The write rights a rule on a non-directory can carry.
fn file_write_rights() -> BitFlags<AccessFs> {
    AccessFs::from_write(WRITE_ABI) & AccessFs::from_file(WRITE_ABI)
}

/// A prepared domain: the Landlock ruleset descriptor the child restricts
/// itself with.
#[derive(Debug)]
pub(crate) struct WriteRuleset {
    fd: OwnedFd,
}

impl WriteRuleset {
    /// The domain for a command that may write beneath `roots` only.
    pub(crate) fn build<'a>(roots: impl IntoIterator<Item = &'a Path>) -> Result<Self, String> {
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(write_rights())
            .and_then(|ruleset| ruleset.scope(Scope::from_all(SCOPE_ABI)))
            .and_then(Ruleset::create)
            .map_err(|error| format!("creating the Landlock ruleset failed: {error}"))?;
        for root in roots {
            let opened = PathFd::new(root)
                .map_err(|error| format!("opening `{}` failed: {error}", root.display()))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(opened, write_rights()))
                .map_err(|error| {
                    format!(
                        "allowing writes beneath `{}` failed: {error}",
                        root.display()
                    )
                })?;
        }
        for device in WRITABLE_DEVICES {
            // A machine without one of them simply has no such rule.
            let Ok(opened) = PathFd::new(device) else {
                continue;
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(opened, file_write_rights()))
                .map_err(|error| format!("allowing writes to `{device}` failed: {error}"))?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        let fd = fd.ok_or_else(|| "the kernel gave no Landlock ruleset".to_owned())?;
        Ok(Self { fd })
    }

    /// The descriptor the child restricts itself with.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }
}

/// What the domain confines on this kernel (reports), from its Landlock
/// ABI version.
pub(crate) fn write_confinement_summary() -> String {
    match super::landlock_abi::kernel_abi() {
        Ok(abi) => {
            let mut parts =
                vec!["writes only beneath the working directory and a private directory"];
            if abi < 2 {
                parts.push("no rename or link into another directory at all (ABI 1)");
            }
            if abi < 3 {
                parts.push("truncation unconfined (needs ABI 3)");
            }
            if abi >= 6 {
                parts.push("signals and abstract sockets scoped to the command");
            } else {
                parts.push("signals and abstract sockets not scoped (needs ABI 6)");
            }
            format!("Landlock ABI {abi}: {}", parts.join("; "))
        }
        Err(why) => format!(
            "unavailable ({why}): a host command writes whatever the parent's user may write"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_builds_where_landlock_is_offered() {
        let built = WriteRuleset::build([Path::new("/tmp")]);
        match super::super::landlock_abi::kernel_abi() {
            Ok(_) => assert!(built.unwrap().raw_fd() > 2),
            Err(_) => assert!(write_confinement_summary().contains("unavailable")),
        }
        // A root that does not exist is an error, not a silent gap.
        if super::super::landlock_abi::kernel_abi().is_ok() {
            let error = WriteRuleset::build([Path::new("/nonexistent-quirl-root")]).unwrap_err();
            assert!(error.contains("nonexistent-quirl-root"), "{error}");
        }
    }
}
