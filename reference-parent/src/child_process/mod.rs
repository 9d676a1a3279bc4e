//! The child-process machinery: everything between "run this program as a
//! worker" and "the worker and its whole tree are gone and reaped" — the
//! parent's side of SPEC §3.1, DESIGN §17.2–§17.4 and §18.1. Protocol frames are
//! not here (the worker handle in `crate::worker` feeds the bytes to the
//! protocol crate); cgroup containment is `crate::cgroup`.
//!
//! Where each job happens:
//!
//! | job | file |
//! |---|---|
//! | which program is the worker (program, arguments, environment; public) | `worker_command.rs` |
//! | the resource limits set before `exec` (public, DESIGN §18.1) | `rlimits.rs` |
//! | spawn a worker: pipes, new session, cleared environment, the `fork` fallback (DESIGN §17.2) | `worker_spawn.rs` |
//! | the `clone(CLONE_VM \| CLONE_VFORK)` / `clone3` child that `exec`s the worker | `vfork_spawn.rs` |
//! | what every child (worker or host command) does between `fork` and `exec` | `child_setup.rs` |
//! | kill a worker's whole tree and reap it, never hitting a reused PGID (DESIGN §17.3, §17.4) | `worker_kill.rs` |
//! | write and read the worker's pipes under a deadline (DESIGN §17.3) | `transport.rs` |
//! | the one blocking wait: `ppoll` over descriptors up to an absolute deadline | `poll.rs` |
//! | signal names, the auto-reap check, a write that cannot raise `SIGPIPE` | `signals.rs` |
//! | the one `/proc/PID/stat` reader (tree sweep, pid-reuse checks) | `proc_stat.rs` |
//!
//! `rlimits` and `worker_command` are public at the crate root
//! (`quirl_lua_reference_parent::rlimits`,
//! `quirl_lua_reference_parent::worker_command`); the rest is crate-private.

pub(crate) mod child_setup;
pub(crate) mod poll;
pub(crate) mod proc_stat;
pub mod rlimits;
pub(crate) mod signals;
pub(crate) mod transport;
mod vfork_spawn;
pub mod worker_command;
pub(crate) mod worker_kill;
pub(crate) mod worker_spawn;
