//! Cancelling a blocked [`ParentClient`](super::ParentClient) call from
//! another thread: the [`Canceller`] handle and the client's end of its
//! wake-up pipe (Unix; off Unix there is nothing to cancel).

use std::io::{self, Write};

/// A handle that cancels a [`ParentClient`](super::ParentClient)'s blocked call from another
/// thread (Unix). Cloneable and `Send + Sync`; made by
/// [`ParentClient::canceller`](super::ParentClient::canceller).
///
/// [`cancel`](Self::cancel) writes one byte into a pipe whose read end the
/// client `poll(2)`s together with the worker's stream, so a call blocked
/// in [`call`](super::ParentClient::call), [`call_with_host`](super::ParentClient::call_with_host)
/// or [`next_event_before`](super::ParentClient::next_event_before) returns at
/// once with a `cancelled` error
/// ([`is_cancelled`](crate::ProtocolError::is_cancelled)), and the connection is
/// [`Abandoned`](crate::SessionState::Abandoned): the worker must be killed
/// (SPEC §13.2). A cancellation is final: every later call of the client
/// fails the same way, whether it was blocked when `cancel` ran or not. A
/// host callback that is running is not interrupted; the call fails when
/// it returns.
#[cfg(unix)]
#[derive(Debug, Clone)]
pub struct Canceller {
    shared: std::sync::Arc<CancelShared>,
}

#[cfg(unix)]
#[derive(Debug)]
struct CancelShared {
    cancelled: std::sync::atomic::AtomicBool,
    wake: io::PipeWriter,
}

#[cfg(unix)]
impl Canceller {
    /// Cancel the client's call in flight and every later one.
    pub fn cancel(&self) {
        use std::sync::atomic::Ordering;
        if !self.shared.cancelled.swap(true, Ordering::SeqCst) {
            // One byte, once: the pipe stays readable for good. A failed
            // write leaves the flag, seen when the wait returns.
            let _ = (&self.shared.wake).write(&[1]);
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.shared
            .cancelled
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The client's end of a [`Canceller`].
#[cfg(unix)]
#[derive(Debug)]
pub(super) struct CancelSignal {
    /// The handle given out, the same every time.
    pub(super) handle: Canceller,
    /// Readable once the handle cancelled.
    pub(super) woken: io::PipeReader,
}

#[cfg(unix)]
impl CancelSignal {
    /// A fresh handle and its pipe; fails only if no pipe can be created.
    pub(super) fn new() -> io::Result<Self> {
        let (woken, wake) = io::pipe()?;
        let handle = Canceller {
            shared: std::sync::Arc::new(CancelShared {
                cancelled: std::sync::atomic::AtomicBool::new(false),
                wake,
            }),
        };
        Ok(Self { handle, woken })
    }
}

/// Whether the client was cancelled.
#[cfg(unix)]
pub(super) fn cancelled(cancel: Option<&CancelSignal>) -> bool {
    cancel.is_some_and(|signal| signal.handle.is_cancelled())
}

#[cfg(not(unix))]
pub(super) fn cancelled(_: Option<&CancelSignal>) -> bool {
    false
}

/// Not available off Unix: nothing to wait for.
#[cfg(not(unix))]
#[derive(Debug)]
pub(super) struct CancelSignal;
