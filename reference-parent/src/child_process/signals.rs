//! What the parent needs to know about signals: their names (one table for
//! every message), whether the kernel would reap children behind the
//! parent's back (DESIGN §17.3), and a pipe write that cannot raise `SIGPIPE`.
//!
//! Why `libc` and `unsafe` here: rustix offers signal dispositions and
//! masks only in its `runtime` module, as `unsafe` functions meant for
//! implementing a libc, and std offers none. The calls below only *query*
//! dispositions and change the calling thread's mask around one write, so
//! each block states the invariant it relies on.

use std::io;
use std::os::fd::BorrowedFd;

/// The conventional Linux name of `signal` (`SIGKILL`, …), if it has one.
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// The current disposition of `signal`, queried without changing it.
fn disposition(signal: libc::c_int) -> io::Result<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is valid storage; a null new action
    // makes `sigaction` a pure query that writes into storage we own.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &raw mut current) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(current)
    }
}

/// Whether the kernel reaps this process's exited children by itself
/// (`SIGCHLD` ignored or `SA_NOCLDWAIT` set). Then a child's pid is freed
/// behind the parent's back and its group may not be signalled (DESIGN §17.3).
pub(crate) fn children_are_auto_reaped() -> io::Result<bool> {
    let current = disposition(libc::SIGCHLD)?;
    Ok(current.sa_sigaction == libc::SIG_IGN || current.sa_flags & libc::SA_NOCLDWAIT != 0)
}

/// `write(2)` that turns a closed pipe into `EPIPE` without letting
/// `SIGPIPE` kill a host process that does not ignore it.
///
/// Rust binaries ignore `SIGPIPE`; a host embedding this library might not.
/// When the signal is not ignored it is blocked in this thread for the
/// write, and a `SIGPIPE` the write raised is consumed before unblocking.
pub(crate) fn write_without_sigpipe(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    let ignored =
        disposition(libc::SIGPIPE).is_ok_and(|current| current.sa_sigaction == libc::SIG_IGN);
    if ignored {
        return Ok(rustix::io::write(fd, bytes)?);
    }
    // SAFETY: `sigset_t` is plain data; the calls initialise and modify sets
    // we own, and the thread's previous mask is restored before returning.
    let (pipe_only, previous, already_pending) = unsafe {
        let mut pipe_only: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut pipe_only);
        libc::sigaddset(&raw mut pipe_only, libc::SIGPIPE);
        libc::sigpending(&raw mut pending);
        let already_pending = libc::sigismember(&raw const pending, libc::SIGPIPE) == 1;
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const pipe_only, &raw mut previous);
        (pipe_only, previous, already_pending)
    };
    let written = rustix::io::write(fd, bytes);
    // SAFETY: as above; a zero timeout makes `sigtimedwait` consume only a
    // `SIGPIPE` that is already pending (the one this write raised).
    unsafe {
        if written == Err(rustix::io::Errno::PIPE) && !already_pending {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&raw const pipe_only, std::ptr::null_mut(), &raw const zero);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const previous, std::ptr::null_mut());
    }
    Ok(written?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn names_common_signals_and_not_real_time_ones() {
        assert_eq!(signal_name(libc::SIGKILL), Some("SIGKILL"));
        assert_eq!(signal_name(libc::SIGTERM), Some("SIGTERM"));
        assert_eq!(signal_name(libc::SIGRTMIN() + 1), None);
    }

    #[test]
    fn a_test_process_reaps_its_own_children() {
        assert!(!children_are_auto_reaped().unwrap());
    }
}
