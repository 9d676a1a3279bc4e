//! Reference parent for `quirl.lua-worker@1`: supervise a sandboxed Lua
//! worker process that owns the VM, with hard deadlines the worker cannot
//! evade.
//!
//! ```no_run
//! use quirl_lua_reference_parent::{
//!     ErrorClass, Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig,
//! };
//!
//! // `quirl-lua --internal-lua-worker-v1` (or any worker speaking the protocol).
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
//! // A native call no Lua hook can interrupt: the parent kills the worker's
//! // whole process tree at the deadline, reaps it and poisons the handle.
//! let error = worker.eval("table.move({}, 1, 90000000, 2)").unwrap_err();
//! assert_eq!(error.class(), ErrorClass::Deadline);
//! assert_eq!(worker.eval("return 1").unwrap_err().class(), ErrorClass::Unavailable);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules, one job each:
//! - [`worker`]: the [`Worker`] handle — spawn + initialize, one request at a
//!   time under an absolute deadline, failure → kill, reap, drain, poison;
//! - `child_process` (private; [`rlimits`] and [`worker_command`] are
//!   public): the child-process machinery — spawning in a new session with
//!   a sanitized environment and descriptors, the kill that cannot hit a
//!   reused PGID and the reap, the pipes and the one `ppoll` wait, signals,
//!   child setup, resource limits, `/proc/PID/stat` (DESIGN §17.2–§17.4,
//!   §18.1); its head comment maps each job to its file;
//! - `cgroup` (private; [`Containment`] is public): one cgroup v2 per
//!   child when the kernel allows it, with `cgroup.kill` as the end of
//!   every child (DESIGN §17.2);
//! - the wire side is the protocol crate's [`ParentConnection`]
//!   (decoder, session, SPEC §9.5 end of stream) — no private copy;
//! - [`process_host`]: answering `quirl.process.run` (DESIGN §16);
//! - [`callback_deadline`]: callbacks held to their declared deadlines;
//! - [`worker_command`]: which program is the worker; [`error`]: typed errors;
//! - [`rlimits`]: the resource limits a worker gets before `exec` (DESIGN §18.1).
//!
//! - `tokio_worker` (feature `tokio`): the async supervisor, a tokio
//!   `Worker` with the same spawning, deadlines and kill → reap → drain →
//!   poison as [`Worker`], and async host-call answering (SPEC §13.2,
//!   §17);
//!
//! - [`lifecycle`]: plugin generations, restart budget and quarantine, pools
//!   and statistics, built from the outside on [`Worker`] values — a
//!   poisoned worker is never reused, a new one is spawned.
//!
//! [`ParentConnection`]: quirl_lua_protocol::ParentConnection

// docs.rs (`[package.metadata.docs.rs]` passes `--cfg docsrs`) labels the
// feature-gated items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod callback_deadline;
mod cgroup;
mod child_process;
pub mod error;
pub mod lifecycle;
pub mod process_host;
#[cfg(test)]
mod test_environment;
pub mod worker;

// Re-exports at the paths these public modules had before they moved under
// `child_process` (public API kept).
pub use child_process::{rlimits, worker_command};

pub use cgroup::{Containment, ContainmentReport, containment_report};
pub use error::{Error, ErrorClass};
pub use process_host::Cancel;
pub use quirl_lua_protocol::records::{Policy, PolicySettings};
pub use rlimits::WorkerLimits;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use worker::tokio_worker;
pub use worker::{Worker, WorkerConfig};
pub use worker_command::{WORKER_ARGUMENT, WORKER_COMMAND_ENV, WorkerCommand};
