//! [`WorkerPool`]: N plain workers (no plugin) for batches of evals and
//! other operations, with the same dispatch, restart budget, quarantine,
//! stats and shutdown as a plugin host.

use std::time::Duration;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{Operation, OperationResult};
use serde_json::Value;

use crate::error::Error;
use crate::worker::{Worker, WorkerConfig};

use super::DEFAULT_SHUTDOWN_BOUND;
use super::manifest::PoolOptions;
use super::pool::{Core, ShutdownReport, start_generation};
use super::stats::PoolStats;

/// A pool of supervised workers that run whatever each call sends.
///
/// Workers keep their globals between the calls they serve, but which
/// member serves a call is up to dispatch: code that needs state across
/// calls should use a pool of one.
pub struct WorkerPool {
    core: Core,
}

impl WorkerPool {
    /// Start `options.size` workers with `config`, named `name` in stats
    /// and errors. Fails (killing whatever started) if any worker cannot
    /// be started and initialized.
    ///
    /// Every worker of the pool observes one cancellation token: the one
    /// set on `config` with [`WorkerConfig::cancel_token`], or a fresh one.
    /// Cancelling it kills every request in flight (counted as
    /// cancellations, not failures) and makes later calls fail at once with
    /// [`Cancelled`](crate::ErrorClass::Cancelled); [`shutdown`](Self::shutdown)
    /// cancels it.
    pub fn start(
        name: impl Into<String>,
        config: WorkerConfig,
        options: PoolOptions,
    ) -> Result<Self, Error> {
        options.validate()?;
        let name = name.into();
        let token = config
            .configured_cancel_token()
            .cloned()
            .unwrap_or_default();
        let (generation, workers) = start_generation(&config, &token, 1, None, options.pool_size())
            .map_err(|error| error.with_context(format!("while starting pool `{name}`")))?;
        Ok(Self {
            core: Core::new(name, options, config, token, generation, workers),
        })
    }

    /// Evaluate a chunk on an idle member.
    pub fn eval(&self, source: &str) -> Result<Value, Error> {
        self.core.call(|worker, _| worker.eval(source))
    }

    /// Run one operation on an idle member (default deadline: the policy's
    /// wall time).
    pub fn call(&self, operation: Operation) -> Result<OperationResult, Error> {
        self.core
            .call(|worker, _| worker.call(operation.clone(), None))
    }

    /// Run `f` on an idle member's worker. A worker that `f` leaves
    /// poisoned is replaced on its member's next call, and counts against
    /// the restart budget.
    ///
    /// `f` runs a second time, on a fresh worker, only if its first run
    /// found the worker retired before anything ran (it ended its session
    /// after answering its previous request with an error, as the reference
    /// worker does after a tripped budget): the first run's request then
    /// failed with [`Unavailable`](crate::ErrorClass::Unavailable) without
    /// running.
    /// A closure that makes several requests should stop at the first
    /// error so that this holds.
    pub fn with_worker<T>(
        &self,
        mut f: impl FnMut(&mut Worker) -> Result<T, Error>,
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

impl Drop for WorkerPool {
    fn drop(&mut self) {
        let _ = self.core.shutdown(DEFAULT_SHUTDOWN_BOUND);
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
