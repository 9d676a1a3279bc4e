//! `/proc` observations of the supervision tests: the members of a process
//! group or session, this process's children and zombies, its threads and
//! open descriptors.
//!
//! `/proc/PID/stat` itself is read by the conformance runner's parser
//! ([`quirl_lua_conformance::proc`], re-exported here): the runner needs
//! it at run time and a product must not depend on this test-only crate, so
//! the one parser lives in the product and the tests use it from there.

use std::time::{Duration, Instant};

pub use quirl_lua_conformance::proc::{ProcStat, all_processes, stat};

/// Processes (zombies included) whose process group or session is `id`.
pub fn group_or_session_members(id: i32) -> Vec<ProcStat> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgrp == id || p.session == id)
        .collect()
}

/// Living (non-zombie) members of group/session `id`, waiting up to
/// `patience` for killed members to finish dying.
pub fn living_members_after(id: i32, patience: Duration) -> Vec<ProcStat> {
    let until = Instant::now() + patience;
    loop {
        let living: Vec<ProcStat> = group_or_session_members(id)
            .into_iter()
            .filter(ProcStat::is_alive)
            .collect();
        if living.is_empty() || Instant::now() >= until {
            return living;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Zombie children of this process.
pub fn own_zombies() -> Vec<ProcStat> {
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    all_processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.state == 'Z')
        .collect()
}

/// Children of this process in any state.
pub fn own_children() -> Vec<ProcStat> {
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    all_processes()
        .into_iter()
        .filter(|p| p.ppid == me)
        .collect()
}

/// Number of threads of this process.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// Names of this process's threads that the parent library would have
/// started (`quirl-lua-…`). The test harness's own threads come and go with
/// concurrent tests, so the tests check these names rather than a count.
pub fn library_threads() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("quirl-lua"))
        .collect()
}

/// Number of open descriptors of this process.
pub fn fd_count() -> usize {
    // The read_dir itself holds one descriptor while counting.
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}
