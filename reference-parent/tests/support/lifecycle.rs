//! Shared helpers of the lifecycle tests: worker commands, plugin files,
//! and /proc checks on the workers a pool reports.

#![allow(dead_code, unused_imports)]

use quirl_lua_reference_parent::lifecycle::PoolStats;
use quirl_lua_reference_parent::{Policy, PolicySettings, WorkerCommand};

use quirl_lua_testkit::procfs;
pub use quirl_lua_testkit::scratch::{Scratch, eventually, plugin_source};

/// The scripted test double (`quirl_lua_testkit::bins::scripted_worker`).
pub fn scripted_worker() -> WorkerCommand {
    WorkerCommand::new(quirl_lua_testkit::bins::scripted_worker())
}

/// The reference worker (`quirl-worker` of quirl-lua-reference-worker, the
/// same worker `quirl-lua --internal-lua-worker-v1` runs in-process; the CLI
/// lives in its own package, reference-parent/cli).
pub fn reference_worker() -> WorkerCommand {
    WorkerCommand::new(quirl_lua_testkit::bins::bin_path(
        "quirl-lua-reference-worker",
        "quirl-worker",
    ))
    .arg(quirl_lua_reference_parent::WORKER_ARGUMENT)
}

/// A policy without process access and the given wall time.
pub fn policy(wall_time_ms: u64) -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms,
    })
    .unwrap()
}

/// A plugin whose prompt segment never returns.
pub const LOOPING_PLUGIN: &str = "quirl.prompt.add_segment({ name = \"version\", deadline_ms = 100, render = function() while true do end end })\n";

/// Pids of the members' current (or last) workers.
pub fn member_pids(stats: &PoolStats) -> Vec<u32> {
    stats
        .members
        .iter()
        .filter_map(|member| member.pid)
        .collect()
}

/// Whether anything (zombies included) is left of the worker `pid`: each
/// worker leads its own session and process group.
pub fn leftovers(pid: u32) -> Vec<procfs::ProcStat> {
    procfs::group_or_session_members(i32::try_from(pid).unwrap())
}
