//! [`PoolOptions`]: size, restart budget, queue and spares of a pool, the
//! same for the blocking and the async pool (DESIGN §17.7).
//!
//! Builder methods are named `with_FIELD` and getters `FIELD`, as for
//! [`WorkerConfig`](crate::WorkerConfig) and
//! [`PluginManifest`](crate::lifecycle::PluginManifest). Values are
//! checked when a pool starts; a bad value is an
//! [`ErrorClass::InvalidInput`] error before any process is spawned.

use std::time::Duration;

use quirl_lua_protocol::records::ErrorCode;

use crate::error::{Error, ErrorClass};

/// Default restart budget: worker failures tolerated inside the window.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// Default forgiveness window: a failure counts against the budget for
/// five minutes.
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_secs(300);
/// Default number of callers that may wait for an idle member.
pub const DEFAULT_QUEUE_CAPACITY: usize = 64;
/// Default longest wait for an idle member.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest pool.
pub const POOL_SIZE_MAX: usize = 64;
/// Largest restart budget.
pub const MAX_RESTARTS_MAX: u32 = 10_000;
/// Largest queue.
pub const QUEUE_CAPACITY_MAX: usize = 65_536;
/// Default number of warm spare workers a pool keeps (DESIGN §17.7).
pub const DEFAULT_SPARES: usize = 1;
/// Most warm spares a pool may keep.
pub const SPARES_MAX: usize = 8;

/// Size, restart budget, queue and spares of a pool.
///
/// ```
/// use std::time::Duration;
/// use quirl_lua_reference_parent::lifecycle::PoolOptions;
///
/// let options = PoolOptions::new().with_size(2).with_max_restarts(5).with_spares(2);
/// assert_eq!((options.size(), options.max_restarts(), options.spares()), (2, 5, 2));
/// assert_eq!(options.restart_window(), Some(Duration::from_secs(300)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    size: usize,
    max_restarts: u32,
    restart_window: Option<Duration>,
    queue_capacity: usize,
    queue_timeout: Duration,
    spares: usize,
    limit_trips_as_failures: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            size: 1,
            max_restarts: DEFAULT_MAX_RESTARTS,
            restart_window: Some(DEFAULT_RESTART_WINDOW),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            spares: DEFAULT_SPARES,
            limit_trips_as_failures: false,
        }
    }
}

impl PoolOptions {
    /// One member, [`DEFAULT_MAX_RESTARTS`] within [`DEFAULT_RESTART_WINDOW`],
    /// a queue of [`DEFAULT_QUEUE_CAPACITY`] waiting at most
    /// [`DEFAULT_QUEUE_TIMEOUT`], [`DEFAULT_SPARES`] warm spare; limit trips
    /// are not failures.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of workers (1..=[`POOL_SIZE_MAX`]).
    #[must_use]
    pub fn with_size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// Number of workers.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Worker failures tolerated inside the window before quarantine
    /// (0..=[`MAX_RESTARTS_MAX`]; 0 quarantines on the first failure).
    #[must_use]
    pub fn with_max_restarts(mut self, max_restarts: u32) -> Self {
        self.max_restarts = max_restarts;
        self
    }

    /// The restart budget.
    pub fn max_restarts(&self) -> u32 {
        self.max_restarts
    }

    /// How long a failure counts against the budget; `None`: for ever
    /// (until the pool's `reset`). A zero window is refused.
    #[must_use]
    pub fn with_restart_window(mut self, window: Option<Duration>) -> Self {
        self.restart_window = window;
        self
    }

    /// The forgiveness window.
    pub fn restart_window(&self) -> Option<Duration> {
        self.restart_window
    }

    /// Callers that may wait for an idle member (0..=[`QUEUE_CAPACITY_MAX`];
    /// 0: a call fails at once when every member is busy).
    #[must_use]
    pub fn with_queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity;
        self
    }

    /// The queue bound.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }

    /// Longest wait in the queue before the call fails as overloaded.
    #[must_use]
    pub fn with_queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = timeout;
        self
    }

    /// The queue wait bound.
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// Warm spare workers kept ready (0..=[`SPARES_MAX`], default
    /// [`DEFAULT_SPARES`]): spawned, initialized and loaded with the plugin
    /// off the callers' path, so that replacing a worker that ended costs
    /// its caller no cold start (DESIGN §17.7). 0 keeps no spare: a
    /// replacement starts on the caller's path.
    #[must_use]
    pub fn with_spares(mut self, spares: usize) -> Self {
        self.spares = spares;
        self
    }

    /// Number of warm spares.
    pub fn spares(&self) -> usize {
        self.spares
    }

    /// Whether a guest's limit trip (its worker retired by design) counts
    /// against the restart budget like a worker failure (default `false`:
    /// a pool that runs untrusted code is not quarantined by runaway
    /// scripts; only deadlines, crashes, violations and failed starts
    /// count).
    #[must_use]
    pub fn with_limit_trips_as_failures(mut self, count: bool) -> Self {
        self.limit_trips_as_failures = count;
        self
    }

    /// Whether limit trips count against the restart budget.
    pub fn limit_trips_as_failures(&self) -> bool {
        self.limit_trips_as_failures
    }

    /// Check every value against its range.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.size == 0 || self.size > POOL_SIZE_MAX {
            return Err(invalid(format!(
                "pool size {} is outside 1..={POOL_SIZE_MAX}",
                self.size
            )));
        }
        if self.max_restarts > MAX_RESTARTS_MAX {
            return Err(invalid(format!(
                "max_restarts {} is above {MAX_RESTARTS_MAX}",
                self.max_restarts
            )));
        }
        if self.restart_window == Some(Duration::ZERO) {
            return Err(invalid("the restart window must not be zero")
                .with_help("use None to never forgive failures"));
        }
        if self.spares > SPARES_MAX {
            return Err(invalid(format!(
                "spares {} is above {SPARES_MAX}",
                self.spares
            )));
        }
        if self.queue_capacity > QUEUE_CAPACITY_MAX {
            return Err(invalid(format!(
                "queue capacity {} is above {QUEUE_CAPACITY_MAX}",
                self.queue_capacity
            )));
        }
        Ok(())
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::new(
        ErrorClass::InvalidInput,
        ErrorCode::InvalidArgument,
        message,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn pool_options_refuse_out_of_range_values() {
        assert!(PoolOptions::new().validate().is_ok());
        for bad in [
            PoolOptions::new().with_size(0),
            PoolOptions::new().with_size(POOL_SIZE_MAX + 1),
            PoolOptions::new().with_max_restarts(MAX_RESTARTS_MAX + 1),
            PoolOptions::new().with_restart_window(Some(Duration::ZERO)),
            PoolOptions::new().with_queue_capacity(QUEUE_CAPACITY_MAX + 1),
            PoolOptions::new().with_spares(SPARES_MAX + 1),
        ] {
            let error = bad.validate().unwrap_err();
            assert_eq!(error.class(), ErrorClass::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn every_setter_has_its_getter() {
        let options = PoolOptions::new()
            .with_size(3)
            .with_max_restarts(7)
            .with_restart_window(None)
            .with_queue_capacity(9)
            .with_queue_timeout(Duration::from_millis(11))
            .with_spares(2)
            .with_limit_trips_as_failures(true);
        assert_eq!(
            (
                options.size(),
                options.max_restarts(),
                options.restart_window(),
                options.queue_capacity(),
                options.queue_timeout(),
                options.spares(),
                options.limit_trips_as_failures()
            ),
            (3, 7, None, 9, Duration::from_millis(11), 2, true)
        );
    }
}
