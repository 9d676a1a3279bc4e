//! Cancellation tokens that wake a waiting parent at once.
//!
//! A [`CancelToken`] is a sticky flag plus a Linux `eventfd`. Cancelling sets
//! the flag and makes the eventfd readable, so a parent blocked in `ppoll` on
//! a worker's pipes wakes in the same instant: cancellation is an event, not
//! something a polling tick discovers later.
//!
//! What this module is not: it does not decide what cancellation means. The
//! worker handle treats a cancelled request like a missed deadline (kill the
//! tree, reap, poison, `resource_limit`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A cloneable, sticky cancellation token.
///
/// Clones share one state: cancelling any clone cancels them all, and a
/// cancelled token stays cancelled. Give each logical operation (or each
/// worker handle) its own token.
#[derive(Clone, Debug)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cancelled: AtomicBool,
    /// Non-blocking, close-on-exec eventfd; readable once cancelled.
    event: OwnedFd,
}

impl CancelToken {
    /// Create a token that is not cancelled.
    ///
    /// Fails only if the process cannot create another file descriptor.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; the return value is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let event = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                event,
            }),
        })
    }

    /// Cancel: every current and future wait on this token returns promptly.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own. A
        // full counter (EAGAIN) already means "readable", so the result can
        // be ignored.
        let _ = unsafe {
            libc::write(
                self.inner.event.as_raw_fd(),
                (&raw const one).cast::<libc::c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Whether [`cancel`](Self::cancel) has been called on any clone.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// The descriptor that becomes readable on cancellation (for `poll`).
    pub(crate) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.inner.event.as_fd()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cancel_is_sticky_and_shared_between_clones() {
        let token = CancelToken::new().unwrap();
        let clone = token.clone();
        assert!(!token.is_cancelled());
        clone.cancel();
        assert!(token.is_cancelled());
        clone.cancel();
        assert!(token.is_cancelled());
    }

    #[test]
    fn cancel_makes_the_wake_descriptor_readable() {
        let token = CancelToken::new().unwrap();
        let mut fds = [libc::pollfd {
            fd: token.wake_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd, zero timeout.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
        assert_eq!(ready, 0);
        token.cancel();
        // SAFETY: as above.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
        assert_eq!(ready, 1);
    }
}
