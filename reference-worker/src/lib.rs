//! Reference worker of `quirl.lua-worker@1`: a process that exclusively owns
//! one sandboxed Lua 5.4 VM and serves a supervising parent over framed JSON
//! on stdin (in) and stderr (out).

#![deny(missing_docs)]

pub mod budget;
pub mod config;
pub mod convert;
pub mod diag;
pub mod error;
pub mod events;
pub mod lint;
pub mod lockdown;
pub mod records_from_lua;
pub mod registry;
pub mod runner;
pub mod sandbox;
pub mod serve;
mod stdio;
pub mod vm;

pub use error::{ErrorCode, OpError};
pub use quirl_lua_metered_vm::declare_system_allocator;
pub use sandbox::os::pin_time_zone;
pub use serve::{Ending, ServeOptions, WorkerError, serve};
pub use stdio::{EXIT_END_OF_INPUT, EXIT_RETIRED, EXIT_VIOLATION, run_stdio_worker};
pub use vm::{Verdict, Vm, VmConfig};
