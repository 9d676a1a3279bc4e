//! Blocking waits on several descriptors up to an absolute deadline.
//!
//! One `ppoll(2)` call per wait, with a nanosecond timeout computed from the
//! absolute deadline each time it is (re)entered. There is no polling tick:
//! the caller's thread sleeps until a descriptor is ready or the deadline
//! passes, which is what makes kill latency a kernel wake-up rather than a
//! sampling interval.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Instant;

/// One descriptor and the events to wait for.
pub(crate) fn interest(fd: BorrowedFd<'_>, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }
}

/// A `pollfd` slot that `poll` ignores (negative descriptor).
pub(crate) const IGNORED: libc::pollfd = libc::pollfd {
    fd: -1,
    events: 0,
    revents: 0,
};

/// Whether a polled slot reported any of `events` (or an error/hang-up).
pub(crate) fn fired(slot: &libc::pollfd, events: libc::c_short) -> bool {
    slot.revents & (events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

/// Wait until one of `fds` is ready or `deadline` passes.
///
/// Returns `Ok(true)` when at least one slot has `revents` set and
/// `Ok(false)` when the deadline passed first. `EINTR` restarts the wait with
/// the remaining time; the deadline never moves.
pub(crate) fn wait_until(fds: &mut [libc::pollfd], deadline: Instant) -> io::Result<bool> {
    loop {
        for slot in fds.iter_mut() {
            slot.revents = 0;
        }
        let now = Instant::now();
        let remaining = deadline.saturating_duration_since(now);
        let timeout = libc::timespec {
            tv_sec: libc::time_t::try_from(remaining.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(remaining.subsec_nanos().cast_signed()),
        };
        let count = libc::nfds_t::try_from(fds.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `fds` is a valid, exclusively borrowed slice of `count`
        // pollfd structs; the timespec lives across the call; a null sigmask
        // keeps the current mask.
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                count,
                &raw const timeout,
                std::ptr::null(),
            )
        };
        if ready > 0 {
            return Ok(true);
        }
        if ready == 0 {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            // Woke a hair early (timer rounding): wait for the rest.
            continue;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::time::Duration;

    #[test]
    fn returns_false_when_the_deadline_passes_with_nothing_ready() {
        let (reader, _writer) = std::io::pipe().unwrap();
        let mut fds = [interest(reader.as_fd(), libc::POLLIN)];
        let deadline = Instant::now() + Duration::from_millis(5);
        assert!(!wait_until(&mut fds, deadline).unwrap());
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn returns_true_when_a_descriptor_is_ready() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        std::io::Write::write_all(&mut writer, b"x").unwrap();
        let mut fds = [IGNORED, interest(reader.as_fd(), libc::POLLIN)];
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(wait_until(&mut fds, deadline).unwrap());
        assert!(fired(&fds[1], libc::POLLIN));
        assert!(!fired(&fds[0], libc::POLLIN));
    }

    #[test]
    fn a_past_deadline_still_reports_ready_descriptors() {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(writer);
        let mut fds = [interest(reader.as_fd(), libc::POLLIN)];
        assert!(wait_until(&mut fds, Instant::now()).unwrap());
        assert!(fired(&fds[0], libc::POLLIN));
    }
}
