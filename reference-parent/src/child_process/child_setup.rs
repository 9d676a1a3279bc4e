//! What every spawned child — a worker (DESIGN §17.2) or a host command
//! (DESIGN §16.6) — does between `fork` and `exec` before anything of its own:
//! lead a new session, give up privilege gains, and let no inherited
//! descriptor beyond 0–2 reach the program.
//!
//! Everything here runs in a child of a multithreaded parent — `fork`ed
//! (host commands, and the worker's fallback) or a `CLONE_VM | CLONE_VFORK`
//! child sharing the parent's memory (workers, the `vfork_spawn` module) —
//! so it is async-signal-safe: system calls only, no allocation, no locks,
//! no panics.

use std::io;

/// A new session and process group (no controlling terminal),
/// `no_new_privs`, and every descriptor from 3 up close-on-exec.
///
/// Runs in the child between `fork` and `exec`: raw system calls only
/// (rustix's, which allocate nothing and take no locks).
pub(crate) fn enter_new_session_locked_down() -> io::Result<()> {
    // The new child is not a group leader, so this succeeds unless the
    // kernel refuses.
    rustix::process::setsid()?;
    // Set-user-ID bits and file capabilities are not honoured, so every
    // process of the tree stays killable by the parent.
    rustix::thread::set_no_new_privs(true)?;
    mark_inherited_descriptors_cloexec()
}

/// Mark every descriptor from 3 up close-on-exec (runs in the child).
fn mark_inherited_descriptors_cloexec() -> io::Result<()> {
    // SAFETY: close_range with integer arguments; CLOSE_RANGE_CLOEXEC only
    // sets flags, so std's exec-error pipe keeps working until exec.
    // rustix 1.x has no `close_range`, hence the raw syscall.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3_u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return Ok(());
    }
    // Kernel before 5.11: sweep up to the descriptor limit.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let end = libc::c_int::try_from(limit.min(1 << 20)).unwrap_or(1 << 20);
    for fd in 3..end {
        // SAFETY: fcntl on a possibly closed descriptor just fails with
        // EBADF. The sweep addresses descriptor numbers this code does not
        // own, which no safe API (std or rustix) allows.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
