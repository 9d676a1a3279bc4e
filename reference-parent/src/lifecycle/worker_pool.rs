//! [`WorkerPool`]: N plain workers (no plugin) for batches of evals and
//! other operations, with the same dispatch, restart budget, quarantine,
//! stats and shutdown as a plugin host.

use std::time::Duration;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{Operation, OperationResult};
use serde_json::Value;

use crate::error::Error;
use crate::supervision::pool::PoolOptions;
use crate::supervision::stats::PoolStats;
use crate::worker::{Worker, WorkerConfig};

use super::pool::{Driver, ShutdownReport};

/// A pool of supervised workers that run whatever each call sends.
///
/// Workers keep their globals between the calls they serve, but which
/// member serves a call is up to dispatch: code that needs state across
/// calls should use a pool of one.
pub struct WorkerPool {
    core: Driver,
}

impl WorkerPool {
    /// Start `options.size` workers with `config`, named `name` in stats
    /// and errors. Fails (killing whatever started) if any worker cannot
    /// be started and initialized.
    ///
    /// Every worker of the pool observes one cancellation token: the one
    /// set on `config` with [`WorkerConfig::with_cancel`], or a fresh one.
    /// Cancelling it kills every request in flight (counted as
    /// cancellations, not failures) and makes later calls fail at once with
    /// [`Cancelled`](crate::ErrorClass::Cancelled); [`shutdown`](Self::shutdown)
    /// cancels it.
    pub fn start(
        name: impl Into<String>,
        config: WorkerConfig,
        options: PoolOptions,
    ) -> Result<Self, Error> {
        let name = name.into();
        let core = Driver::start(name.clone(), config, options, None)
            .map_err(|error| error.with_context(format!("while starting pool `{name}`")))?;
        Ok(Self { core })
    }

    /// Evaluate a chunk on an idle member.
    pub fn eval(&self, source: &str) -> Result<Value, Error> {
        self.core.call(|worker, _| worker.eval(source))
    }

    /// Run one operation on an idle member (default deadline: the policy's
    /// wall time).
    pub fn call(&self, operation: Operation) -> Result<OperationResult, Error> {
        self.core.call(|worker, _| worker.call(operation, None))
    }

    /// Run `f` on an idle member's worker (several requests in a row on
    /// one worker, for example). A worker that `f` leaves ended (a
    /// failure, or a tripped limit) is replaced before its member's next
    /// call, and a worker failure counts against the restart budget.
    pub fn with_worker<T>(
        &self,
        f: impl FnOnce(&mut Worker) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.core.call(|worker, _| f(worker))
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// A snapshot of the pool's statistics.
    pub fn stats(&self) -> PoolStats {
        self.core.stats()
    }

    /// Whether the restart budget is spent.
    pub fn is_quarantined(&self) -> bool {
        self.core.is_quarantined()
    }

    /// Lift a quarantine and forget all failures; returns whether the pool
    /// was quarantined.
    pub fn reset(&self) -> bool {
        self.core.reset()
    }

    /// Stop the pool: see [`PluginHost::shutdown`](super::PluginHost::shutdown).
    pub fn shutdown(&self, bound: Duration) -> ShutdownReport {
        self.core.shutdown(bound)
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("name", &self.core.name())
            .field("options", &self.core.options())
            .finish_non_exhaustive()
    }
}
