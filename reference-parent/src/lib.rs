//! Reference parent for `quirl.lua-worker@1`.

pub mod cancel;
pub mod command;
mod containment;
mod poll;
pub mod process_host;

pub use cancel::CancelToken;
pub use command::{WORKER_ARGUMENT, WORKER_COMMAND_ENV, WorkerCommand};
