//! Cancellation a host already has: an `Arc<AtomicBool>` it sets, or any
//! predicate, watched by the clients of [`crate::blocking`] and
//! `tokio_io` while a call waits for the worker.
//!
//! A flag cannot wake anyone up: a client that watches one checks it at
//! every wake-up and wakes at least every [`CANCEL_CHECK_INTERVAL`] while
//! it waits, so a call ends within that interval (plus the scheduler's
//! delay) of the flag being set. The blocking [`Canceller`] and a tokio
//! future (`tokio_io::ParentClient::cancel_when`) wake the waiting call at
//! once instead; a host that can call a function when it cancels should
//! prefer them, a host whose cancellation is a flag it shares with other
//! code uses a [`Cancellation`]. Either way a running host callback is not
//! interrupted: the call fails when it returns (BENCHMARKS.md X7 measures
//! both latencies).
//!
//! [`Canceller`]: crate::blocking::Canceller

use std::fmt;
use std::panic::RefUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a waiting client looks at a [`Cancellation`] at least: a
/// call watching a flag ends within this long of the flag being set (plus
/// the scheduler's delay). One millisecond is tokio's timer resolution;
/// a waiting call then wakes 1,000 times a second (BENCHMARKS.md X7).
pub const CANCEL_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// A condition that cancels a client's calls once it holds: a shared
/// `Arc<AtomicBool>` (`Cancellation::from(flag)`) or any predicate
/// ([`Cancellation::when`]). Cheap to clone; `Send + Sync`.
///
/// Installed with `cancel_on` on a blocking or tokio `ParentClient`, it is
/// checked before every send, at every wake-up while a call waits for the
/// worker (at least every [`CANCEL_CHECK_INTERVAL`]) and after every host
/// callback. Once it holds, the call fails with `cancelled`
/// ([`is_cancelled`](crate::ProtocolError::is_cancelled)), the connection
/// is [`Abandoned`](crate::SessionState::Abandoned) and the worker must be
/// killed (SPEC §13.2); the cancellation is final for that client even if
/// the flag is cleared later (a host resets its flag for the next worker).
///
/// ```
/// use quirl_lua_protocol::cancellation::Cancellation;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// let flag = Arc::new(AtomicBool::new(false));
/// let cancellation = Cancellation::from(Arc::clone(&flag));
/// assert!(!cancellation.is_cancelled());
/// flag.store(true, Ordering::Relaxed); // the host's own code, anywhere
/// assert!(cancellation.is_cancelled());
/// ```
#[derive(Clone)]
pub struct Cancellation {
    holds: Arc<dyn Fn() -> bool + Send + Sync + RefUnwindSafe>,
}

impl Cancellation {
    /// Cancel once `predicate` returns `true`. It is called from the
    /// waiting client's thread, at least every [`CANCEL_CHECK_INTERVAL`]
    /// while a call waits: keep it cheap and non-blocking. (`RefUnwindSafe`
    /// keeps the clients unwind-safe; a closure over atomics, `Arc`s and
    /// `Mutex`es is.)
    pub fn when(predicate: impl Fn() -> bool + Send + Sync + RefUnwindSafe + 'static) -> Self {
        Self {
            holds: Arc::new(predicate),
        }
    }

    /// Whether the condition holds now.
    pub fn is_cancelled(&self) -> bool {
        (self.holds)()
    }
}

impl From<Arc<AtomicBool>> for Cancellation {
    /// Cancel once the flag is `true` (read with `Acquire`).
    fn from(flag: Arc<AtomicBool>) -> Self {
        Self::when(move || flag.load(Ordering::Acquire))
    }
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancellation")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_cancels_once_set_and_a_predicate_when_it_holds() {
        let flag = Arc::new(AtomicBool::new(false));
        let by_flag = Cancellation::from(Arc::clone(&flag));
        let clone = by_flag.clone();
        assert!(!by_flag.is_cancelled() && !clone.is_cancelled());
        flag.store(true, Ordering::Release);
        assert!(by_flag.is_cancelled() && clone.is_cancelled());
        let limit = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&limit);
        let by_predicate = Cancellation::when(move || counter.load(Ordering::Relaxed) > 2);
        assert!(!by_predicate.is_cancelled());
        limit.store(3, Ordering::Relaxed);
        assert!(by_predicate.is_cancelled());
        assert!(format!("{by_predicate:?}").contains("cancelled: true"));
    }
}
