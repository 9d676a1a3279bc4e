//! `quirl-lua`: run Lua in a supervised, sandboxed worker process.
//!
//! With `--internal-lua-worker-v1` as its first argument the binary is the
//! worker itself (the default worker command is this executable in that
//! mode); otherwise it is the command-line parent. See README.md for the
//! commands, flags and exit codes.

mod cli;

use std::process::ExitCode;

use quirl_lua_reference_parent::WORKER_ARGUMENT;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == WORKER_ARGUMENT)
    {
        return worker_mode();
    }
    cli::run()
}

/// Worker mode: speak `quirl.lua-worker@1` on stdin/stderr.
fn worker_mode() -> ExitCode {
    // SAFETY: this binary declares no `#[global_allocator]`, so Rust's
    // global allocator is `std::alloc::System`, the C library's.
    unsafe { quirl_lua_reference_worker::declare_system_allocator() };
    // SAFETY: worker mode starts here, before any thread exists, so nothing
    // reads the environment while it changes (the time zone `lua.os` needs
    // under the worker's lockdown).
    unsafe { quirl_lua_reference_worker::pin_time_zone() };
    quirl_lua_reference_worker::run_stdio_worker()
}
