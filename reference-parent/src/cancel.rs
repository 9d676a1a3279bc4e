//! Cancellation as an event a waiter can sleep on: the token workers,
//! pools and the process host share.
//!
//! Setting a flag is not enough for a waiter that sleeps in `poll()` until a
//! pipe has data, the child exits or the deadline passes: cancellation must
//! also make a descriptor readable. [`CancelSignal`] is what the process
//! host needs from any token; [`Cancel`] is a minimal implementation (a
//! sticky flag and an `eventfd`) that [`WorkerConfig::with_cancel`] and the
//! pools take. `WatchedCancel` (crate-private) is a token that also fires
//! when the worker a host command serves exits (DESIGN §17.6).
//!
//! [`WorkerConfig::with_cancel`]: crate::WorkerConfig::with_cancel

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the process host needs from a cancellation token.
pub trait CancelSignal {
    /// Whether cancellation was requested. Must be sticky.
    fn is_cancelled(&self) -> bool;

    /// A descriptor that is readable, level-triggered, from the moment of
    /// cancellation on (an `eventfd` that is never drained, for example).
    /// `None` makes the host check [`Self::is_cancelled`] on a 10 ms tick
    /// instead.
    fn wake_fd(&self) -> Option<BorrowedFd<'_>>;
}

/// A cloneable, sticky cancellation token: a flag plus an `eventfd` that
/// becomes readable on cancellation and stays readable.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cancelled: AtomicBool,
    /// `None` only if the eventfd could not be created; then the host ticks.
    event: Option<OwnedFd>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A fresh, uncancelled token. If no descriptor can be created, the
    /// token still works, and hosts observe it on a 10 ms tick.
    pub fn new() -> Self {
        use rustix::event::{EventfdFlags, eventfd};
        let event = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).ok();
        Self {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                event,
            }),
        }
    }

    /// Cancel: set the flag and wake every host waiting on this token.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        if let Some(event) = &self.inner.event {
            // Adds one to the eventfd counter. A saturated counter (EAGAIN)
            // is already readable.
            let _ = rustix::io::write(event, &1_u64.to_ne_bytes());
        }
    }

    /// Whether [`Cancel::cancel`] has been called on any clone.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// An owned descriptor that is readable, level-triggered, once this
    /// token is cancelled (a duplicate of its eventfd). Fails only if the
    /// token has no eventfd or no descriptor can be duplicated.
    pub(crate) fn register(&self) -> std::io::Result<CancelWaiter> {
        let event = self
            .inner
            .event
            .as_ref()
            .ok_or_else(|| std::io::Error::other("cancellation token has no eventfd"))?;
        Ok(CancelWaiter {
            fd: event.try_clone()?,
        })
    }
}

/// A descriptor readable once its token is cancelled; see [`Cancel::register`].
#[derive(Debug)]
pub(crate) struct CancelWaiter {
    fd: OwnedFd,
}

impl CancelWaiter {
    /// The descriptor itself (for registration with an event loop).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for CancelWaiter {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl CancelSignal for Cancel {
    fn is_cancelled(&self) -> bool {
        Cancel::is_cancelled(self)
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.event.as_ref().map(AsFd::as_fd)
    }
}

/// A [`Cancel`] that also fires when any of a few more descriptors becomes
/// readable: one `epoll` instance over the token's `eventfd` and those
/// descriptors, so that one wake descriptor covers them all (the process
/// host waits on exactly one, [`CancelSignal::wake_fd`]). The supervisor
/// runs a host command under it with the worker's pidfd added: the command
/// is killed the moment the worker it serves dies (DESIGN §17.6).
///
/// Hand-written around `epoll` (rustix) because the signal must be one
/// level-triggered descriptor: every watched descriptor stays readable
/// once it fired (an `eventfd` never drained, an exited process's pidfd),
/// so the `epoll` descriptor does too, and the signal is sticky.
#[derive(Debug)]
pub(crate) struct WatchedCancel {
    cancel: Cancel,
    epoll: OwnedFd,
}

impl WatchedCancel {
    /// `cancel`, plus `also` (each readable once it fired, for good).
    pub(crate) fn new(cancel: &Cancel, also: &[BorrowedFd<'_>]) -> io::Result<Self> {
        use rustix::event::epoll;
        let instance = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let event = cancel
            .inner
            .event
            .as_ref()
            .ok_or_else(|| io::Error::other("cancellation token has no eventfd"))?;
        for (slot, fd) in std::iter::once(event.as_fd())
            .chain(also.iter().copied())
            .enumerate()
        {
            epoll::add(
                &instance,
                fd,
                epoll::EventData::new_u64(slot as u64),
                epoll::EventFlags::IN,
            )?;
        }
        Ok(Self {
            cancel: cancel.clone(),
            epoll: instance,
        })
    }
}

impl CancelSignal for WatchedCancel {
    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled() || readable(self.epoll.as_fd()).unwrap_or(false)
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.as_fd())
    }
}

/// `poll()` readiness of `fd` without waiting.
pub(crate) fn readable(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    use crate::child_process::poll;
    let mut fds = [poll::interest(fd, poll::PollFlags::IN)];
    poll::wait_until(&mut fds, std::time::Instant::now())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cancel_is_sticky_shared_and_level_triggered() {
        let token = Cancel::new();
        let clone = token.clone();
        let fd = token.wake_fd().unwrap();
        assert!(!token.is_cancelled());
        assert!(!readable(fd).unwrap());
        clone.cancel();
        assert!(token.is_cancelled());
        assert!(readable(fd).unwrap());
        assert!(readable(fd).unwrap(), "stays readable");
    }

    #[test]
    fn a_watched_cancel_fires_on_its_token_or_on_a_watched_descriptor() {
        let token = Cancel::new();
        let (exit_read, exit_write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let watched = WatchedCancel::new(&token, &[exit_read.as_fd()]).unwrap();
        assert!(!watched.is_cancelled());
        assert!(!readable(watched.wake_fd().unwrap()).unwrap());
        // A watched descriptor fires (as a pidfd does when its process exits).
        drop(exit_write);
        assert!(watched.is_cancelled());
        assert!(readable(watched.wake_fd().unwrap()).unwrap());
        assert!(!token.is_cancelled(), "the token itself was not cancelled");
        let other = WatchedCancel::new(&token, &[]).unwrap();
        assert!(!other.is_cancelled());
        token.cancel();
        assert!(other.is_cancelled());
        assert!(readable(other.wake_fd().unwrap()).unwrap());
    }

    #[test]
    fn a_registered_waiter_becomes_readable_on_cancel() {
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        assert!(!readable(waiter.as_fd()).unwrap());
        token.cancel();
        assert!(readable(waiter.as_fd()).unwrap());
    }
}
