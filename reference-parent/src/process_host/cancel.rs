//! A cancellation token that can wake a blocked `poll()`.
//!
//! Setting a flag is not enough for a host that sleeps in `poll()` until a
//! pipe has data, the child exits or the deadline passes: cancellation must
//! also be an event. Each running command registers a private wake pipe with
//! the token; [`Cancel::cancel`] sets the flag and writes one byte to every
//! registered pipe.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Shared cancellation token. Clones observe and trigger the same state.
///
/// Cancellation is sticky: once cancelled, a token stays cancelled, and every
/// later call that observes it fails at once with `resource_limit`.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    wakers: Mutex<Vec<(u64, OwnedFd)>>,
}

impl Cancel {
    /// A fresh, uncancelled token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel: set the flag and wake every command waiting on this token.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let wakers = self
            .inner
            .wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, fd) in wakers.iter() {
            // A full pipe already holds a wake-up, so EAGAIN is success.
            // SAFETY: `fd` is an open, owned, non-blocking pipe write end and
            // the buffer is one valid byte.
            let _ = unsafe { libc::write(fd.as_raw_fd(), [1_u8].as_ptr().cast(), 1) };
        }
    }

    /// Whether [`Cancel::cancel`] has been called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Register a wake pipe. The registration is removed when the returned
    /// guard drops; both pipe ends are closed then.
    pub(crate) fn register(&self) -> io::Result<CancelWaiter> {
        let (read, write) = nonblocking_pipe()?;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner
            .wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, write));
        Ok(CancelWaiter {
            token: self.clone(),
            id,
            read,
        })
    }
}

/// A registered wake pipe; readable once the token is cancelled.
///
/// Callers must check [`Cancel::is_cancelled`] after registering: a cancel
/// that happened before registration sets the flag but writes no byte.
pub(crate) struct CancelWaiter {
    token: Cancel,
    id: u64,
    read: OwnedFd,
}

impl AsFd for CancelWaiter {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

impl Drop for CancelWaiter {
    fn drop(&mut self) {
        self.token
            .inner
            .wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

pub(crate) fn nonblocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    let result = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cancel_wakes_a_registered_waiter_and_is_sticky() {
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        assert!(!token.is_cancelled());
        token.clone().cancel();
        assert!(token.is_cancelled());
        let mut byte = [0_u8; 1];
        // SAFETY: reading one byte into a valid buffer from an owned fd.
        let read = unsafe { libc::read(waiter.as_fd().as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        assert_eq!(read, 1);
        assert!(token.is_cancelled());
    }

    #[test]
    fn dropping_a_waiter_deregisters_it() {
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        assert_eq!(token.inner.wakers.lock().unwrap().len(), 1);
        drop(waiter);
        assert!(token.inner.wakers.lock().unwrap().is_empty());
    }
}
