//! Blocking waits on several descriptors up to an absolute deadline: the
//! one waiting helper of the parent (DESIGN §17.3).
//!
//! One `ppoll(2)` call per wait (through rustix), with a nanosecond timeout
//! computed from the absolute deadline each time it is (re)entered. There is
//! no polling tick: the caller's thread sleeps until a descriptor is ready or
//! the deadline passes, which is what makes kill latency a kernel wake-up
//! rather than a sampling interval. The worker transport, the worker reap,
//! the cgroup emptiness wait and the process host all wait through here.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use rustix::event::{Nsecs, Secs, Timespec};
pub(crate) use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

/// Make `fd` non-blocking, so a read or write returns `EAGAIN` and the
/// caller waits here instead of inside the system call.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// One descriptor and the events to wait for.
pub(crate) fn interest(fd: BorrowedFd<'_>, events: PollFlags) -> PollFd<'_> {
    PollFd::from_borrowed_fd(fd, events)
}

/// Whether a polled slot reported any of `events` (or an error/hang-up).
pub(crate) fn fired(slot: &PollFd<'_>, events: PollFlags) -> bool {
    slot.revents()
        .intersects(events | PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL)
}

/// Wait until one of `fds` is ready or `deadline` passes.
///
/// Returns `Ok(true)` when at least one slot has `revents` set and
/// `Ok(false)` when the deadline passed first. `EINTR` restarts the wait with
/// the remaining time; the deadline never moves.
pub(crate) fn wait_until(fds: &mut [PollFd<'_>], deadline: Instant) -> io::Result<bool> {
    loop {
        for slot in fds.iter_mut() {
            slot.clear_revents();
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = Timespec {
            tv_sec: Secs::try_from(remaining.as_secs()).unwrap_or(Secs::MAX),
            tv_nsec: Nsecs::from(remaining.subsec_nanos()),
        };
        match rustix::event::poll(fds, Some(&timeout)) {
            Ok(0) => {
                if Instant::now() >= deadline {
                    return Ok(false);
                }
                // Woke a hair early (timer rounding): wait for the rest.
            }
            Ok(_) => return Ok(true),
            Err(Errno::INTR) => {}
            Err(error) => return Err(error.into()),
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
        let mut fds = [interest(reader.as_fd(), PollFlags::IN)];
        let deadline = Instant::now() + Duration::from_millis(5);
        assert!(!wait_until(&mut fds, deadline).unwrap());
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn returns_true_when_a_descriptor_is_ready() {
        let (idle, _idle_writer) = std::io::pipe().unwrap();
        let (reader, mut writer) = std::io::pipe().unwrap();
        std::io::Write::write_all(&mut writer, b"x").unwrap();
        let mut fds = [
            interest(idle.as_fd(), PollFlags::IN),
            interest(reader.as_fd(), PollFlags::IN),
        ];
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(wait_until(&mut fds, deadline).unwrap());
        assert!(fired(&fds[1], PollFlags::IN));
        assert!(!fired(&fds[0], PollFlags::IN));
    }

    #[test]
    fn a_past_deadline_still_reports_ready_descriptors() {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(writer);
        let mut fds = [interest(reader.as_fd(), PollFlags::IN)];
        assert!(wait_until(&mut fds, Instant::now()).unwrap());
        assert!(fired(&fds[0], PollFlags::IN));
    }
}
