//! The worker's Landlock domain (DESIGN §18.3, step 4): after `initialize`
//! the worker needs no file at all, so it restricts itself to a domain that
//! handles every filesystem right the kernel knows and grants none, and
//! also handles TCP bind/connect and scopes signals and abstract UNIX
//! sockets to the domain. It is defence in depth under the seccomp filter
//! (which already kills `open`, `socket` and `kill`): a filter mistake
//! still reaches no file.
//!
//! Best effort by kernel: where Landlock is missing or disabled the step
//! does nothing and [`summary`] says so; a ruleset the kernel refuses while
//! it offers Landlock is a lockdown failure (fatal, DESIGN §18.3).

use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetStatus, Scope,
};

use super::LockdownError;

/// The newest ABI this code asks for; older kernels get what they have.
const WANTED_ABI: ABI = ABI::V6;

/// The kernel's Landlock ABI version, or why there is none. Probed once per
/// process; also what the reference parent uses for host commands (SPEC
/// §16.6).
pub fn kernel_abi() -> Result<i32, &'static str> {
    static ABI_VERSION: OnceLock<Result<i32, &'static str>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // SAFETY: `landlock_create_ruleset(NULL, 0,
        // LANDLOCK_CREATE_RULESET_VERSION)` is the documented read-only
        // query of the ABI version: no memory is read or written and no
        // descriptor is created. The landlock crate keeps its own query
        // private.
        let version = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0_usize,
                1_u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        if version > 0 {
            return i32::try_from(version).map_err(|_| "the Landlock ABI version is out of range");
        }
        Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => "Landlock is built into the kernel but not enabled",
            Some(libc::ENOSYS) => "the kernel has no Landlock (Linux 5.13 or later)",
            _ => "the Landlock query failed",
        })
    })
}

/// Enter the empty domain (see the module docs). Irreversible.
pub fn enter_empty_domain() -> Result<Option<RestrictionStatus>, LockdownError> {
    if kernel_abi().is_err() {
        return Ok(None);
    }
    let failed = |error: landlock::RulesetError| {
        LockdownError(format!("the Landlock domain could not be entered: {error}"))
    };
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(WANTED_ABI))
        .and_then(|ruleset| ruleset.handle_access(AccessNet::from_all(WANTED_ABI)))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(WANTED_ABI)))
        .and_then(|ruleset| ruleset.create())
        .and_then(|ruleset| ruleset.restrict_self())
        .map_err(failed)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(LockdownError(
            "the kernel offers Landlock but did not enforce the worker's domain".to_owned(),
        ));
    }
    Ok(Some(status))
}

/// One line for the report: what [`enter_empty_domain`] does here.
pub fn summary() -> String {
    match kernel_abi() {
        Ok(abi) => format!(
            "available (ABI {abi}): after initialize, a Landlock domain with no filesystem access \
             at all, no TCP bind or connect, signals and abstract sockets scoped to the domain"
        ),
        Err(why) => {
            format!("unavailable ({why}): the seccomp filter alone keeps files out of reach")
        }
    }
}
