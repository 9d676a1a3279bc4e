//! /proc observations shared by the supervision tests.
//!
//! Everything here reads Linux procfs: the members of a process group, this
//! process's zombie children, threads and open descriptors.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// One line of `/proc/PID/stat`, the fields the tests need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let mut rest = text.get(close + 2..)?.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        comm,
        state,
        ppid,
        pgrp,
        session,
    })
}

pub fn all_processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

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
            .filter(|p| p.state != 'Z' && p.state != 'X')
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
