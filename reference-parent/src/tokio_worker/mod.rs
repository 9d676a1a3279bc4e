//! The async drivers (feature `tokio`): [`Worker`] and [`WorkerPool`],
//! the blocking [`crate::Worker`] and [`crate::lifecycle::WorkerPool`] on
//! tokio — the same supervision core (`crate::supervision`), so the same
//! errors, retirement, restarts, budget, quarantine, spares and stats.
//!
//! ```no_run
//! # async fn example() -> Result<(), quirl_lua_reference_parent::Error> {
//! use quirl_lua_reference_parent::tokio_worker::Worker;
//! use quirl_lua_reference_parent::{ErrorClass, LimitKind, Policy, WorkerCommand, WorkerConfig};
//!
//! let command = WorkerCommand::new("/usr/local/bin/quirl-worker");
//! let mut worker = Worker::spawn(WorkerConfig::new(command, Policy::quirl_script_profile())).await?;
//! assert_eq!(worker.eval("return 6 * 7").await?, serde_json::json!(42));
//! let tripped = worker.eval("while true do end").await.unwrap_err();
//! assert_eq!(tripped.class(), ErrorClass::Limit);
//! assert_eq!(tripped.limit(), Some(LimitKind::Instructions));
//! // The worker retired; this call runs on a fresh one.
//! assert_eq!(worker.eval("return 1").await?, serde_json::json!(1));
//! worker.shutdown().await
//! # }
//! ```
//!
//! - **Spawning** is the blocking driver's own (the private `worker_spawn`
//!   module, on `spawn_blocking`): its own session and process group (or
//!   a cgroup of its own), a cleared environment plus the declared
//!   entries, no descriptors beyond 0–2, the resource limits of DESIGN
//!   §18.1 (SPEC §3.1, DESIGN §17.2).
//! - **Waiting**: the worker's pipes, its pidfd and the cancellation
//!   token's `eventfd` are registered with tokio (`AsyncFd`) and read and
//!   written with the blocking driver's non-blocking system calls; the
//!   request's future waits on all of them and the deadline at once. No
//!   thread or task is started per request.
//! - **Deadlines** (SPEC §10, DESIGN §17.6): every request, host calls
//!   included, runs under an absolute deadline, the policy's
//!   `wall_time_ms` from its sending unless the caller gives one
//!   (`startup_timeout` for `initialize`).
//! - **Failure and retirement** (SPEC §13.2, DESIGN §17.4): on a
//!   deadline, a crash, a violation or a cancellation the handle closes
//!   the worker's stdin, kills its whole tree and reaps it (the blocking
//!   kill, on `spawn_blocking`), drains its output and returns a typed
//!   [`Error`](crate::Error); after a tripped limit it retires the worker
//!   the same way. The next call starts a fresh worker (and loads the
//!   plugin the handle served): no call is ever sent into a worker that
//!   ended. Dropping a call's future mid-request kills and reaps the
//!   worker right there; the next call starts a fresh one.
//! - **Host calls** (DESIGN §16) are answered by the configured process
//!   host ([`ContainedHost`]: grants, containment, Landlock, truncation,
//!   the per-call deadline) or by an async host function
//!   ([`Worker::call_with_host`]) that is handed the call and the
//!   contained host, for the calls it does not answer itself. Either is
//!   raced against the deadline, the token and the worker's exit: a worker
//!   that dies while its host call is pending is reported as a crash at
//!   once.
//! - **Pool**: [`WorkerPool`] is the blocking pool's policy with the same
//!   [`PoolOptions`](crate::lifecycle::PoolOptions) and
//!   [`PoolStats`](crate::lifecycle::PoolStats).
//! - **End**: [`Worker::shutdown`] closes stdin and lets the worker exit
//!   (SPEC §3.3); dropping the handle kills the tree and reaps the worker
//!   synchronously (a `SIGKILL` and a `waitpid`) so that nothing outlives
//!   it (SPEC §17.1).
//!
//! The handles need a tokio runtime with I/O and time enabled (as
//! `#[tokio::main]` and `#[tokio::test]` build it); either flavor. tokio's
//! own process driver waits only for the children tokio spawned, so it
//! never reaps a worker behind the handle: the group kill is still sent
//! while the worker is unreaped (SPEC §13.2-b, DESIGN §17.3).
//!
//! Files: `worker.rs` ([`Worker`]), `transport.rs` (the pipes on tokio),
//! `process.rs` (spawn, kill → reap → drain), `host.rs` ([`ContainedHost`]),
//! `pool.rs` ([`WorkerPool`]).

mod host;
mod pool;
mod process;
mod transport;
mod worker;

pub use crate::supervision::exchange::HostAnswer;
pub use host::ContainedHost;
pub use pool::WorkerPool;
pub use worker::Worker;
