//! `quirl-worker`: the reference worker of `quirl.lua-worker@1`.
//!
//! Reads parent frames on stdin and writes worker frames on stderr; stdout
//! is never written. It accepts (and ignores) Quirl's worker-mode argument
//! `--internal-lua-worker-v1`, so it can stand in for `quirl` directly.

use std::process::ExitCode;

fn main() -> ExitCode {
    // SAFETY: this binary declares no `#[global_allocator]`, so Rust's
    // global allocator is `std::alloc::System`, the C library's.
    unsafe { quirl_lua_reference_worker::declare_system_allocator() };
    // SAFETY: first thing in `main`: no other thread exists to read the
    // environment while it changes.
    unsafe { quirl_lua_reference_worker::pin_time_zone() };
    quirl_lua_reference_worker::run_stdio_worker()
}
