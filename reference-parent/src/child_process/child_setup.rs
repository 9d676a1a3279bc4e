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
//!
//! Also here: the pieces both spawns share — the child's own stack, the
//! parent's fully blocked signal mask around the clone, and descriptors
//! renumbered above 0–2 before they are put there.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;

use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};

/// Usable size of a child's stack. The child's steps are a few small
/// frames (glibc's `posix_spawn` uses 32 KiB); the mapping is not touched
/// beyond what is used, so the size costs nothing.
const CHILD_STACK_BYTES: usize = 128 << 10;

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

/// [`enter_new_session_locked_down`] with a new process group instead of a
/// new session: for the init of a host command's PID namespace (DESIGN
/// §16.6), which never touches a terminal and whose program starts its own
/// session. (A new session also makes a new scheduler autogroup, whose
/// first runs wait behind every busy group of a loaded machine: one per
/// command is enough.)
pub(crate) fn enter_new_group_locked_down() -> io::Result<()> {
    rustix::process::setpgid(None, None)?;
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

/// Empty every capability set of the calling thread (DESIGN §16.6): the
/// bounding set (up to capability `bounding_last`, when the caller holds
/// `CAP_SETPCAP`; without it the set cannot be changed, and a process
/// without capabilities under `no_new_privs` gains none at `exec`), the
/// ambient set, and the effective, permitted and inheritable sets. After
/// this an `exec` — even by user id 0 — starts with no capability at all.
/// Runs in a child before `exec`: rustix's raw system calls only.
pub(crate) fn drop_capabilities(bounding_last: Option<u32>) -> io::Result<()> {
    if let Some(last) = bounding_last {
        for capability in 0..=last.min(63) {
            match rustix::thread::remove_capability_from_bounding_set(
                CapabilitySet::from_bits_retain(1 << capability),
            ) {
                Ok(()) => {}
                // Past the kernel's last capability.
                Err(rustix::io::Errno::INVAL) => break,
                Err(error) => return Err(error.into()),
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// The highest capability the running kernel knows
/// (`/proc/sys/kernel/cap_last_cap`), when this process may empty a
/// child's bounding set (it holds `CAP_SETPCAP`); `None` otherwise.
/// Read in the parent, before any child is made.
pub(crate) fn bounding_set_to_drop() -> Option<u32> {
    let sets = rustix::thread::capabilities(None).ok()?;
    if !sets.effective.contains(CapabilitySet::SETPCAP) {
        return None;
    }
    Some(last_capability())
}

/// The highest capability the running kernel knows
/// (`/proc/sys/kernel/cap_last_cap`; 63 if unreadable, the drop then stops
/// at the kernel's `EINVAL`).
pub(crate) fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(63)
}

/// Renumber `fd` to 3 or above if it is one of 0–2 (possible when the
/// host runs with a standard descriptor closed), so that putting one
/// descriptor on 0–2 never overwrites another.
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// The child's stack: a private anonymous mapping whose lowest page is a
/// guard (no access), unmapped on drop.
pub(crate) struct ChildStack {
    pub(crate) base: *mut c_void,
    pub(crate) len: usize,
}

impl ChildStack {
    pub(crate) fn map() -> io::Result<Self> {
        let guard = rustix::param::page_size();
        let len = CHILD_STACK_BYTES + guard;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks;
        // it aliases nothing.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::STACK,
            )?
        };
        let stack = Self { base, len };
        // SAFETY: the first page of the mapping we own; nothing uses it yet.
        unsafe { rustix::mm::mprotect(base, guard, MprotectFlags::empty())? };
        Ok(stack)
    }

    /// The highest address (stacks grow down on every Linux target std's
    /// `clone` users run on), 16-byte aligned because the mapping is
    /// page-aligned.
    pub(crate) fn top(&self) -> *mut c_void {
        self.base.wrapping_byte_add(self.len)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the child that used it has exec'd or
        // exited (CLONE_VFORK), so nothing runs on it.
        let _ = unsafe { rustix::mm::munmap(self.base, self.len) };
    }
}

/// All signals blocked in the calling thread until drop, which restores the
/// previous mask.
pub(crate) struct SignalsBlocked {
    pub(crate) previous: libc::sigset_t,
}

impl SignalsBlocked {
    pub(crate) fn all() -> io::Result<Self> {
        // SAFETY: sigset_t values of the right type, filled by sigfillset
        // and pthread_sigmask.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let done = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
            if done != 0 {
                return Err(io::Error::from_raw_os_error(done));
            }
            Ok(Self { previous })
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores a mask pthread_sigmask returned.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, ptr::null_mut());
        }
    }
}
