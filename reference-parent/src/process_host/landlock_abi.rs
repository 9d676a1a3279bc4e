//! The kernel's Landlock ABI version (DESIGN §16.6, §18.3): one read-only
//! query, made once per process, for the execute ruleset of host commands.
//!
//! The reference worker asks the same query for its own domain
//! (`reference-worker/src/lockdown/landlock.rs`) with a copy of this
//! function: neither crate may depend on the other (the supervisor must not
//! link the worker and Lua, and the worker has no use for the supervisor),
//! no source file may reach into another crate, and the landlock crate
//! keeps its own query private (`LandlockStatus::current`). The CLI, which
//! links both, tests that the two answer alike
//! (`reference-parent/cli/tests/landlock_probe.rs`).

use std::sync::OnceLock;

/// The kernel's Landlock ABI version, or why there is none. Probed once per
/// process.
pub fn kernel_abi() -> Result<i32, &'static str> {
    static ABI_VERSION: OnceLock<Result<i32, &'static str>> = OnceLock::new();
    *ABI_VERSION.get_or_init(query)
}

fn query() -> Result<i32, &'static str> {
    // SAFETY: `landlock_create_ruleset(NULL, 0,
    // LANDLOCK_CREATE_RULESET_VERSION)` is the documented read-only query of
    // the ABI version: no memory is read or written and no descriptor is
    // created.
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
}
