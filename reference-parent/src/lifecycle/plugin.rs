//! [`PluginHost`]: one plugin, its generations and its pool.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{
    ContributionKind, EventHandlerReport, ExecutionContext, ExecutionOutcome, ExtensionEvent,
    Operation, OperationResult, PluginRegistrations,
};
use serde_json::Value;

use crate::error::Error;
use crate::supervision::pool::Program;
use crate::supervision::stats::PoolStats;
use crate::worker::Worker;

use super::manifest::PluginManifest;
use super::pool::{Driver, ShutdownReport, start_generation};

/// A plugin and the pool of workers that run it.
///
/// Every member's worker has loaded the current generation's source.
/// Callbacks are dispatched to an idle member; see the
/// [module documentation](super) for restarts, quarantine and reloads.
pub struct PluginHost {
    core: Driver,
    manifest: PluginManifest,
    /// Serializes reloads (each one starts a whole generation).
    reloading: Mutex<()>,
}

/// A successful [`PluginHost::reload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reload {
    /// The generation that replaced `previous`.
    pub generation: u64,
    /// The generation that was retired.
    pub previous: u64,
    /// What the new generation registered.
    pub registrations: PluginRegistrations,
}

impl PluginHost {
    /// Read the manifest's source, start its pool and load the plugin into
    /// every member (generation 1). Cancellation works as for
    /// [`WorkerPool::start`](super::WorkerPool::start), with the token of
    /// the manifest's worker configuration.
    ///
    /// Fails, with nothing left running, if the manifest is invalid, the
    /// source cannot be read, or any worker cannot be started or refuses
    /// the plugin (a syntax error is a [`Guest`](crate::ErrorClass::Guest)
    /// error with the worker's record).
    pub fn start(manifest: PluginManifest) -> Result<Self, Error> {
        manifest.validate()?;
        let source = manifest.read_source()?;
        let config = manifest.worker_config()?;
        let core = Driver::start(
            manifest.name().to_owned(),
            config,
            manifest.pool(),
            Some((source, source_name(&manifest))),
        )
        .map_err(|error| {
            error.with_context(format!("while starting plugin `{}`", manifest.name()))
        })?;
        Ok(Self {
            core,
            manifest,
            reloading: Mutex::new(()),
        })
    }

    /// Re-read the source file and replace the current generation with a
    /// new one.
    ///
    /// Every member of the new generation is started and has loaded the
    /// plugin before anything is swapped, so a reload that fails (the file
    /// is unreadable, a syntax error, a load that times out) leaves the
    /// current generation serving, untouched, and says why. On success,
    /// idle members switch at once and busy members when their call
    /// returns; the old workers are closed and reaped. A reload neither
    /// spends nor restores the restart budget, and does not lift a
    /// quarantine (see [`reset`](Self::reset)); a reload while quarantined
    /// installs the new generation, whose workers wait idle until the
    /// reset.
    pub fn reload(&self) -> Result<Reload, Error> {
        let _one_at_a_time = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = self.core.generation().number;
        let number = previous + 1;
        let failed = |error: Error| {
            error.with_context(format!(
                "reload of plugin `{}` to generation {number} failed; generation {previous} keeps serving",
                self.manifest.name()
            ))
        };
        let source = self.manifest.read_source().map_err(failed)?;
        let (generation, workers) = start_generation(
            self.core.config(),
            number,
            Some((source, source_name(&self.manifest))),
            self.core.options().size(),
        )
        .map_err(failed)?;
        let registrations = match &generation.program {
            Program::Plugin { registrations, .. } => registrations.clone(),
            Program::Bare => PluginRegistrations::default(),
        };
        self.core.install(generation, workers).map_err(failed)?;
        Ok(Reload {
            generation: number,
            previous,
            registrations,
        })
    }

    /// Render the prompt segment `name`.
    pub fn render_prompt(&self, name: &str, context: Value) -> Result<Option<String>, Error> {
        self.core
            .call(|worker, _| worker.render_prompt(name, context))
    }

    /// Ask the completion provider registered for `command`.
    pub fn complete(&self, command: &str, context: Value) -> Result<Value, Error> {
        self.core
            .call(|worker, _| worker.complete(command, context))
    }

    /// Run the plugin command `name`; `timeout` defaults to the policy's
    /// wall time.
    pub fn command(
        &self,
        name: &str,
        context: ExecutionContext,
        timeout: Option<Duration>,
    ) -> Result<ExecutionOutcome, Error> {
        self.core.call(|worker, _| {
            let timeout =
                timeout.unwrap_or_else(|| Duration::from_millis(worker.policy().wall_time_ms()));
            worker.plugin_command(name, context, timeout)
        })
    }

    /// Dispatch an extension event to the plugin's subscribers.
    pub fn event(&self, event: ExtensionEvent) -> Result<Vec<EventHandlerReport>, Error> {
        self.core.call(|worker, _| worker.event(event))
    }

    /// Invoke a registered contribution.
    pub fn contribution(
        &self,
        kind: ContributionKind,
        name: &str,
        context: Value,
    ) -> Result<Value, Error> {
        self.core
            .call(|worker, _| worker.contribution(kind, name, context))
    }

    /// Evaluate a chunk in a member's plugin VM (its globals are the
    /// plugin's).
    pub fn eval(&self, source: &str) -> Result<Value, Error> {
        self.core.call(|worker, _| worker.eval(source))
    }

    /// Run one operation on a member.
    pub fn call(&self, operation: Operation) -> Result<OperationResult, Error> {
        self.core.call(|worker, _| worker.call(operation, None))
    }

    /// Run `f` on an idle member's worker; see [`WorkerPool::with_worker`](super::WorkerPool::with_worker).
    pub fn with_worker<T>(
        &self,
        f: impl FnOnce(&mut Worker) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.core.call(|worker, _| f(worker))
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.manifest.name()
    }

    /// The manifest the host was started from.
    pub fn manifest(&self) -> &PluginManifest {
        &self.manifest
    }

    /// The generation now serving (1 + successful reloads).
    pub fn generation(&self) -> u64 {
        self.core.generation().number
    }

    /// What the serving generation registered.
    pub fn registrations(&self) -> PluginRegistrations {
        match &self.core.generation().program {
            Program::Plugin { registrations, .. } => registrations.clone(),
            Program::Bare => PluginRegistrations::default(),
        }
    }

    /// A snapshot of the plugin's statistics.
    pub fn stats(&self) -> PoolStats {
        self.core.stats()
    }

    /// Whether the restart budget is spent.
    pub fn is_quarantined(&self) -> bool {
        self.core.is_quarantined()
    }

    /// Lift a quarantine and forget all failures; members start fresh
    /// workers on their next call. Returns whether the plugin was
    /// quarantined.
    pub fn reset(&self) -> bool {
        self.core.reset()
    }

    /// Stop the host: refuse new calls (they fail with
    /// [`Unavailable`](crate::ErrorClass::Unavailable)), wake queued
    /// callers, cancel busy requests (their workers are killed and reaped
    /// by the calls that hold them), close every idle worker and warm spare
    /// and reap it, and wait up to `bound` for busy members to come back.
    ///
    /// The host's threads (the spare keeper, and short-lived ones that
    /// close idle workers in parallel) are all joined before this returns.
    /// Idempotent; dropping the host does the same with
    /// [`DEFAULT_SHUTDOWN_BOUND`](super::DEFAULT_SHUTDOWN_BOUND).
    pub fn shutdown(&self, bound: Duration) -> ShutdownReport {
        self.core.shutdown(bound)
    }
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

fn source_name(manifest: &PluginManifest) -> String {
    manifest.source_path().display().to_string()
}
