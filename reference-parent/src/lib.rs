//! Reference parent for `quirl.lua-worker@1`: supervise a sandboxed Lua
//! worker process that owns the VM, with hard deadlines the worker cannot
//! evade.
//!
//! ```no_run
//! use quirl_lua_reference_parent::{
//!     ErrorClass, LimitKind, Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig,
//! };
//!
//! // An installed worker: `quirl-worker`, or `quirl-lua --internal-lua-worker-v1`
//! // (or any worker speaking the protocol). Not `WorkerCommand::current_exe()`
//! // in your own binary: that would start your program again as the worker.
//! let command = WorkerCommand::new("/usr/local/bin/quirl-lua").arg("--internal-lua-worker-v1");
//! let policy = Policy::new(PolicySettings {
//!     allow_process: false,
//!     memory_limit_bytes: 32 << 20,
//!     instruction_limit: 100_000_000,
//!     wall_time_ms: 250,
//! })?;
//! let mut worker = Worker::spawn(WorkerConfig::new(command, policy))?;
//! assert_eq!(worker.eval("return 6 * 7")?, serde_json::json!(42));
//!
//! // A runaway guest trips its instruction budget inside the worker, which
//! // answers and is retired: a VM whose limit tripped is never reused.
//! let error = worker.eval("while true do end").unwrap_err();
//! assert_eq!((error.class(), error.limit()), (ErrorClass::Limit, Some(LimitKind::Instructions)));
//!
//! // A guest stuck past the deadline (a host command that never ends, a
//! // native call no hook interrupts) is killed by the parent, whole tree.
//! // Either way the next call runs on a fresh worker.
//! assert_eq!(worker.eval("return 1")?, serde_json::json!(1));
//! assert_eq!(worker.restarts(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules, one job each:
//! - `supervision` (private): the clock-free supervision core — every
//!   decision of every driver: the request's steps over the protocol
//!   crate's [`ParentConnection`], how a request ended as a typed
//!   [`Error`], retirement and restarts, the restart budget, the pool's
//!   dispatch, queue, spares, quarantine and stats (DESIGN §17.8);
//! - [`worker`]: the blocking driver, [`Worker`]; [`tokio_worker`]
//!   (feature `tokio`): the async drivers, `Worker` and `WorkerPool`;
//! - [`lifecycle`]: the blocking pools, [`lifecycle::WorkerPool`] and
//!   [`lifecycle::PluginHost`] (generations, reload);
//! - `child_process` (private; [`rlimits`] and [`worker_command`] are
//!   public): spawning in a new session with a sanitized environment and
//!   descriptors, the kill that cannot hit a reused PGID and the reap, the
//!   pipes and the one `ppoll` wait, signals, child setup, resource
//!   limits, `/proc/PID/stat` (DESIGN §17.2–§17.4, §18.1);
//! - `cgroup` (private; [`Containment`] is public): one cgroup v2 per
//!   child when the kernel allows it (DESIGN §17.2);
//! - [`process_host`]: answering `quirl.process.run` (DESIGN §16);
//! - [`cancel`]: the cancellation token workers, pools and the process
//!   host share;
//! - [`callback_deadline`]: callbacks held to their declared deadlines;
//! - [`error`]: typed errors, with [`LimitKind`].
//!
//! [`ParentConnection`]: quirl_lua_protocol::ParentConnection
//! [`tokio_worker`]: https://docs.rs/quirl-lua-reference-parent/latest/quirl_lua_reference_parent/tokio_worker/

// docs.rs (`[package.metadata.docs.rs]` passes `--cfg docsrs`) labels the
// feature-gated items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod callback_deadline;
pub mod cancel;
mod cgroup;
mod child_process;
pub mod error;
pub mod lifecycle;
pub mod process_host;
mod supervision;
#[cfg(test)]
mod test_environment;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio_worker;
pub mod worker;

pub use child_process::{rlimits, worker_command};

pub use cancel::Cancel;
pub use cgroup::{Containment, ContainmentReport, containment_report};
pub use error::{Error, ErrorClass};
pub use quirl_lua_protocol::records::{Policy, PolicySettings};
pub use rlimits::WorkerLimits;
pub use supervision::exchange::HostAnswer;
pub use supervision::limit::LimitKind;
pub use worker::{Worker, WorkerConfig};
pub use worker_command::{WORKER_ARGUMENT, WORKER_COMMAND_ENV, WorkerCommand};
