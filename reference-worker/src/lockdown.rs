//! S8 hook point: what the worker drops after its VM exists.
//!
//! [`after_vm_built`] runs once, after `initialize` built the VM and before
//! the worker answers it (so before any guest code runs). It is where the
//! later lockdown task installs no-new-privs, the seccomp allowlist and
//! rlimits. It does nothing yet.

use std::fmt;

/// A lockdown step that could not be applied; the worker treats it as
/// fatal and exits without answering `initialize`.
#[derive(Debug, Clone)]
pub struct LockdownError(pub String);

impl fmt::Display for LockdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker lockdown failed: {}", self.0)
    }
}

impl std::error::Error for LockdownError {}

/// Drop the privileges the worker no longer needs (no-op for now).
pub fn after_vm_built() -> Result<(), LockdownError> {
    Ok(())
}
