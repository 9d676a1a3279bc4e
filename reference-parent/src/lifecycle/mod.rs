//! Plugin lifecycle: generations, the restart budget, quarantine, pools,
//! stats and shutdown (DESIGN §17.7).
//!
//! A [`Worker`](crate::Worker) is one process that is never reused once it
//! fails. This module keeps a plugin (or a batch of evals) running across
//! such failures without letting a broken plugin turn into a restart storm:
//!
//! - [`PluginHost`] owns one plugin ([`PluginManifest`]: name, source file,
//!   policy, grants, declared environment, pool size, restart budget) and
//!   the pool of workers that have loaded its current generation.
//! - [`WorkerPool`] is the same pool without a plugin, for plain eval
//!   batches (`quirl-lua batch --pool N`).
//! - [`PoolStats`] / [`MemberStats`] are serializable snapshots;
//!   [`ShutdownReport`] says what a shutdown did.
//!
//! This module is the blocking driver of the supervision core's pool
//! (`crate::supervision::pool`): the same policy is offered to async hosts
//! as `tokio_worker::WorkerPool` (feature `tokio`). What this module is
//! not: a scheduler with priorities, or a process supervisor that outlives
//! its handle. Every call runs on the caller's thread; the one thread a
//! pool owns keeps its warm spares and is joined when the pool shuts down.
//!
//! ```no_run
//! use std::time::Duration;
//! use quirl_lua_reference_parent::WorkerCommand;
//! use quirl_lua_reference_parent::lifecycle::{PluginHost, PluginManifest};
//!
//! let host = PluginHost::start(
//!     PluginManifest::new("git-prompt", "plugins/git.lua")
//!         .with_worker(WorkerCommand::new("/usr/local/bin/quirl-worker"))
//!         .with_pool_size(2)
//!         .with_max_restarts(3),
//! )?;
//! let text = host.render_prompt("branch", serde_json::json!({}))?;
//! host.reload()?; // picks up an edited file; a broken edit keeps the old code serving
//! println!("{}", serde_json::to_string(&host.stats()).unwrap_or_default());
//! host.shutdown(Duration::from_secs(3));
//! # Ok::<(), quirl_lua_reference_parent::Error>(())
//! ```
//!
//! # Generations
//!
//! A generation is one version of the plugin's source as loaded into
//! workers: generation 1 at start, one more per successful
//! [`reload`](PluginHost::reload). A reload reads the file again and starts
//! a complete new set of workers (spawn, `initialize`, `load_plugin`)
//! *before* touching the serving one; if any step fails, the new workers
//! are killed and reaped, the old generation keeps serving, and the error
//! says why (the worker's own record for a syntax error, with context
//! naming both generations). On success, idle members switch at once, busy
//! members when their call returns, and the old workers are closed and
//! reaped. A poisoned worker is never reused: its member gets a fresh
//! worker of the *same* generation (same validated source) on its next
//! call — a restart.
//!
//! # Restart budget and quarantine
//!
//! These rules apply per plugin (per pool), across all of its members,
//! and they are the supervision core's (`supervision::pool`), so the
//! async `tokio_worker::WorkerPool` keeps them exactly alike.
//!
//! 1. A **failure** is a call or a start that ends a worker for a reason
//!    of the worker's own: the request's deadline passed and the parent
//!    killed it (`timeouts`); it crashed, exited or closed its stream
//!    (`crashes`); it violated the protocol (`violations`); a worker could
//!    not be started, initialized or loaded with the plugin
//!    (`spawn_failures`); or it was found dead when a call reached it
//!    (`found_dead`; the call then ran on a fresh worker).
//! 2. Not failures: guest errors (the worker stays in use); **limit
//!    trips** (`limit_trips`: the guest spent its instructions, memory or
//!    wall time, the worker answered `resource_limit` and was retired by
//!    design, `retirements`) — a pool that runs untrusted code must not be
//!    quarantined by runaway scripts, unless
//!    [`PoolOptions::with_limit_trips_as_failures`] says so; cancellations by
//!    the host (a cancelled token, shutdown); calls refused by quarantine, a
//!    full queue or shutdown; a failed reload (the serving generation is
//!    not harmed).
//! 3. A worker that ended (any of the above, or a limit trip) is never
//!    sent another request: its member takes a warm spare at once, or
//!    starts a fresh worker on its next call (`restarts` counts both), as
//!    long as the pool is not quarantined.
//! 4. **Forgiveness window.** A failure counts against the budget for
//!    `restart_window` (default 5 minutes, [`DEFAULT_RESTART_WINDOW`]) and
//!    is then forgotten. Successes forgive nothing: a plugin that fails
//!    every other call is still failing. With no window (`None`), failures
//!    are never forgotten. The window bounds restarts to `max_restarts` per
//!    window, as crash-loop limits of service managers and editors'
//!    extension hosts do, while a plugin that fails rarely over a long
//!    session is not disabled for it.
//! 5. **Quarantine.** When a failure leaves more than `max_restarts`
//!    failures inside the window (default `max_restarts` 3,
//!    [`DEFAULT_MAX_RESTARTS`]), the plugin is quarantined at once: no
//!    further restart is attempted, idle workers are closed and reaped,
//!    queued callers are woken, and every call fails immediately (without
//!    touching a process) with [`ErrorClass::Quarantined`](crate::ErrorClass::Quarantined)
//!    (code `lua`; exit code 5 in the CLI), whose context gives the
//!    failure count and the last failure. With the defaults that is the
//!    fourth failure: the first one plus three failed restarts.
//!    `max_restarts` 0 quarantines on the first failure.
//! 6. Quarantine is sticky. Time does not lift it and neither does a
//!    reload; only an explicit [`reset`](PluginHost::reset), which also
//!    forgets every recorded failure. Members then start fresh workers on
//!    their next call.
//!
//! # Pools and dispatch
//!
//! A pool has `size` members (1..=[`POOL_SIZE_MAX`]); each holds at most one
//! worker and runs one call at a time. A call goes to an idle member,
//! round-robin among the idle ones (a member without a worker counts as
//! idle and starts one). When every member is busy the caller waits in a
//! first-come-first-served queue of at most `queue_capacity` callers
//! (default [`DEFAULT_QUEUE_CAPACITY`]) for at most `queue_timeout`
//! (default [`DEFAULT_QUEUE_TIMEOUT`]); a full queue or an expired wait
//! fails at once with [`ErrorClass::Overloaded`](crate::ErrorClass::Overloaded)
//! (code `resource_limit`). Members share nothing but the budget: one
//! member's failure kills only its own worker, and calls on the others
//! proceed. Which member serves a call is not specified, so state a plugin
//! keeps in Lua globals is per member.
//!
//! # Warm spares
//!
//! A pool keeps [`PoolOptions::spares`] (default [`DEFAULT_SPARES`], at
//! most [`SPARES_MAX`]) warm spare workers, started by its keeper thread
//! off the callers' path: spawned, initialized, loaded with the serving
//! generation's plugin and warmed with one `eval "return nil"`. When a
//! call returns with its worker ended (a failure, or a tripped limit that
//! retired it), the member's slot takes a ready spare at once (a
//! restart), so the next call pays no cold start; a member whose worker
//! ended while no spare was ready takes one when its next call is
//! dispatched, or else starts a fresh worker on that caller's path. The
//! next spare starts 20 ms after one is taken. A spare start that fails is
//! a failure against the restart budget and pauses spares until a start on
//! a caller's path succeeds, a reload, or a reset. Quarantine, reload and
//! shutdown close spares; shutdown joins the keeper.
//!
//! # Stats
//!
//! [`PluginHost::stats`] returns a [`PoolStats`]: name, generation,
//! quarantine state, budget and window, queue, refused calls, the sum of
//! the member counters (`invocations`, `successes`, `guest_errors`,
//! `limit_trips`, `timeouts`, `crashes`, `violations`, `cancellations`,
//! `spawn_failures`,
//! `restarts`, `limit_trips`, `retirements`, `found_dead`; at any
//! snapshot `invocations` is the sum of the outcome counters plus the
//! busy members), the last error code and class, latency percentiles
//! (p50/p90/p99/max over each member's last [`LATENCY_SAMPLES_MAX`] calls,
//! measured from dispatch to return, including a restart), the spares
//! (`spares`, `spare_capacity`, `spare_pids`, `spares_started`,
//! `spares_used`, `spare_failures`, `spares_paused`) and one
//! [`MemberStats`] per member (generation, pid, running, state, the same
//! counters, last error, latency).
//!
//! # Shutdown
//!
//! [`PluginHost::shutdown`] refuses new calls, wakes queued callers, cancels
//! busy requests (their workers are killed and reaped by the calls holding
//! them), gives idle workers their end of input and
//! [`SHUTDOWN_GRACE`](crate::worker::SHUTDOWN_GRACE) to exit (in parallel,
//! on threads joined before it returns; killed at once when the bound is
//! shorter than that), reaps them, closes the spares the same way, joins
//! the keeper, and waits up to the bound for busy members to return. The [`ShutdownReport`] lists anything that was not
//! clean. Dropping a host or pool shuts it down with
//! [`DEFAULT_SHUTDOWN_BOUND`].

mod manifest;
mod plugin;
mod pool;
mod worker_pool;

use std::time::Duration;

pub use crate::supervision::pool::options::{
    DEFAULT_MAX_RESTARTS, DEFAULT_QUEUE_CAPACITY, DEFAULT_QUEUE_TIMEOUT, DEFAULT_RESTART_WINDOW,
    DEFAULT_SPARES, MAX_RESTARTS_MAX, POOL_SIZE_MAX, PoolOptions, QUEUE_CAPACITY_MAX, SPARES_MAX,
};
pub use crate::supervision::stats::{
    Counters, LATENCY_SAMPLES_MAX, Latency, MemberState, MemberStats, PoolStats,
};
pub use manifest::{PLUGIN_NAME_BYTES_MAX, PluginManifest};
pub use plugin::{PluginHost, Reload};
pub use pool::ShutdownReport;
pub use worker_pool::WorkerPool;

/// How long dropping a host or pool waits for busy members.
pub const DEFAULT_SHUTDOWN_BOUND: Duration = Duration::from_secs(3);
