//! Reference parent for `quirl.lua-worker@1`.

pub mod command;
mod containment;
pub mod error;
mod host;
pub mod lifecycle;
mod poll;
pub mod process_host;
mod transport;
mod wire;
pub mod worker;

pub use command::{WORKER_ARGUMENT, WORKER_COMMAND_ENV, WorkerCommand};
pub use error::{Error, ErrorKind};
pub use process_host::Cancel;
pub use quirl_lua_protocol::Policy;
pub use worker::{Worker, WorkerConfig};
