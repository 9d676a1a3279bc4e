//! The worker holds no capability after `initialize` (DESIGN §18.3, step
//! 3): a worker started by a parent running as root would otherwise keep
//! every root capability for its whole life. It needs none — it makes no
//! privileged system call, and the seccomp filter denies the ones a
//! capability would matter for — so before answering `initialize` it
//! empties the bounding set (where it holds `CAP_SETPCAP`, which a process
//! without capabilities does not: its bounding set then cannot grant it
//! anything either, since `no_new_privs` is set and it never calls
//! `execve`), the ambient set, and the effective, permitted and inheritable
//! sets. `/proc/<pid>/status` then shows `CapEff`, `CapPrm`, `CapInh` and
//! `CapAmb` all zero (and `CapBnd` zero where the bounding set could be
//! emptied).

use rustix::thread::{CapabilitySet, CapabilitySets};

use super::LockdownError;

/// Empty every capability set this process can change (see the module
/// docs). Irreversible.
pub fn drop_all() -> Result<(), LockdownError> {
    let failed = |what: &str, error: rustix::io::Errno| {
        LockdownError(format!("dropping capabilities failed ({what}): {error}"))
    };
    let held = rustix::thread::capabilities(None).map_err(|error| failed("capget", error))?;
    if held.effective.contains(CapabilitySet::SETPCAP) {
        for capability in 0..64_u32 {
            match rustix::thread::remove_capability_from_bounding_set(
                CapabilitySet::from_bits_retain(1 << capability),
            ) {
                Ok(()) => {}
                // Past the kernel's last capability.
                Err(rustix::io::Errno::INVAL) => break,
                Err(error) => return Err(failed("bounding set", error)),
            }
        }
    }
    rustix::thread::clear_ambient_capability_set().map_err(|error| failed("ambient set", error))?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|error| failed("capset", error))?;
    Ok(())
}

/// One line for the report: what the step does.
pub fn summary() -> String {
    "every capability dropped before initialize is answered (effective, permitted, inheritable, ambient, and the bounding set where the worker holds CAP_SETPCAP)".to_owned()
}
