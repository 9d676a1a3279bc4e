//! The supervision core: every decision of the supervisor, clock-free and
//! without I/O (DESIGN §17.8).
//!
//! This module starts no thread, touches no tokio, spawns no process and
//! reads no clock outside its tests: the time is handed in by the caller,
//! as the protocol crate's connections take it (and as quinn-proto's
//! `Connection` does). The drivers around it do the I/O and nothing else:
//!
//! | driver | what it adds |
//! |---|---|
//! | [`crate::Worker`] (blocking) | spawn, one `ppoll` over the pipes, the pidfd, the cancellation token and the deadline; kill, reap, drain |
//! | [`crate::tokio_worker::Worker`] (feature `tokio`) | the same on tokio: the same non-blocking pipes waited on with `AsyncFd`, kill and reap on `spawn_blocking` |
//! | [`crate::lifecycle::WorkerPool`], [`crate::lifecycle::PluginHost`] | a mutex and condition variables around [`pool::PoolCore`], the spare keeper thread |
//! | [`crate::tokio_worker::WorkerPool`] (feature `tokio`) | a mutex and `Notify` around the same [`pool::PoolCore`], the spare keeper task |
//!
//! What is decided here, once for every driver:
//!
//! | job | file |
//! |---|---|
//! | the request in flight and its deadline | `flight.rs` |
//! | which limit a guest tripped, from the worker's record (SPEC §11.4) | `limit.rs` |
//! | how a request ended → the one typed [`Error`](crate::Error) | `classify.rs` |
//! | one request's exchange over the protocol crate's `ParentConnection`: send, feed, step, host answers | `exchange.rs` |
//! | one worker slot's life: live or ended, retirement after a tripped limit, restarts, the plugin replayed into a fresh worker | `life.rs` |
//! | the typed requests (`eval`, `render_prompt`, …): operation, deadline, result | `typed.rs` |
//! | the restart budget: failures inside the forgiveness window | `budget.rs` |
//! | a pool: members, dispatch, the queue, spares, quarantine, generations, counters | `pool/` |
//! | the counters, latency samples and serializable stats | `stats.rs` |
//!
//! Its tests run without processes or clocks: instants are made up, bytes
//! are fed by hand.

pub(crate) mod budget;
pub(crate) mod classify;
pub(crate) mod exchange;
pub(crate) mod flight;
pub(crate) mod life;
pub mod limit;
pub(crate) mod pool;
pub mod stats;
pub(crate) mod typed;
