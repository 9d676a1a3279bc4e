//! Ownership of one child's process tree: kill it all, reap the leader last.
//!
//! Where the kernel allows it (DESIGN §16.7) the leader is the first process
//! of a PID namespace of its own. Then the kernel does the work: when the
//! leader exits, or is killed, every other process of the namespace is
//! killed and gone before the leader's exit can be observed — however it
//! forked, whatever session, group or cgroup it moved to — and nothing of
//! the tree can be reparented to this process. A kill is one `SIGKILL` to
//! the unreaped leader (and, in cgroup mode, `cgroup.kill` too).
//!
//! Without a PID namespace the child is started with `setsid()`, so it
//! leads a new session and a new process group whose ids both equal its
//! PID. While the leader is unreaped (running, or a zombie), that PID
//! cannot be handed to another process, so no unrelated process can create
//! a group or session with that id: a `killpg(pid)` or a session match can
//! only reach processes of this tree. Every path therefore kills first and
//! reaps the leader last, and nothing is signalled by group or session id
//! after the reap. This is the anchor argument of DESIGN §17.3 (which Quirl
//! gets from a separate anchor process); here the leader itself is the
//! anchor.
//!
//! Descendants that left the group (`setpgid`) stay in the session; those
//! that also left the session (`setsid`) are still found through their
//! parent chain while that chain is alive. To keep the chain alive, the
//! tree is frozen before anything is killed: SIGSTOP to the group, then
//! rounds of `/proc` scans that SIGSTOP every further member, until a round
//! finds nothing new; only then is everything SIGKILLed. Members outside the
//! group are signalled through a pidfd opened and re-verified (same start
//! time, still alive) before the signal, so a PID reused between the scan
//! and the signal is never hit. The one process the sweep cannot find is a
//! descendant that started its own session *and* was orphaned before the
//! sweep (a daemon's double fork); where this process adopts orphans
//! (`orphans`) it is found among them.
//!
//! In cgroup mode (DESIGN §17.2) the tree also owns the command's cgroup: a
//! kill is `cgroup.kill` (every member, whatever its session or parent)
//! followed by the group kill, then the sweep of adopted orphans (in every
//! mode: a member that left the cgroup and lost its parent is found there),
//! and after the reap the cgroup is emptied and removed. Before the kill,
//! the members that left the leader's session are recorded as escapes, so
//! the caller can report them.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions, WaitOptions};

use super::orphans;
use crate::cgroup::ChildCgroup;
use crate::child_process::poll::{self, PollFd, PollFlags};
use crate::child_process::proc_stat::{ProcStat, read_stat};

/// Rounds of scan-and-stop before giving up on a tree that keeps forking.
const SWEEP_ROUNDS_MAX: usize = 16;
/// How long the sweep waits for its killed processes to exit.
const SWEEP_EXIT_WAIT: Duration = Duration::from_secs(1);
/// Longest wait for a cgroup's members to settle before the escape verdict
/// (only a member that keeps running costs it).
const SETTLE_WAIT: Duration = Duration::from_millis(500);
/// Poll interval of that wait.
const SETTLE_POLL: Duration = Duration::from_millis(1);

/// A spawned child whose tree is killed and whose leader is reaped exactly
/// once, on every path including unwinding.
pub(crate) struct OwnedTree {
    pid: Pid,
    pidfd: Option<OwnedFd>,
    /// The leader is the init of a PID namespace of its own.
    pid_namespace: bool,
    /// The leader's status, once reaped.
    status: Option<ExitStatus>,
    /// The tree was killed after the leader had exited; nothing can have
    /// joined it since.
    killed: bool,
    reaped: bool,
    /// The command's own cgroup, in cgroup mode.
    cgroup: Option<ChildCgroup>,
    /// Members of the cgroup outside the leader's session at the first kill.
    escaped: Vec<u32>,
    /// Cgroup cleanup problems, as sentences.
    problems: Vec<String>,
}

impl OwnedTree {
    /// Own the unreaped child `pid` (and its cgroup); `pid_namespace`:
    /// it is the first process of a PID namespace of its own. Without
    /// pidfd support the leader's exit is polled instead (see `exit_fd`).
    pub(crate) fn new(pid: Pid, cgroup: Option<ChildCgroup>, pid_namespace: bool) -> Self {
        orphans::register(pid.as_raw_pid());
        Self {
            pidfd: rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok(),
            pid,
            pid_namespace,
            status: None,
            killed: false,
            reaped: false,
            cgroup,
            escaped: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Processes of the command's cgroup that had left the leader's
    /// session when the tree was killed (cgroup mode only).
    pub(crate) fn escaped(&self) -> &[u32] {
        &self.escaped
    }

    /// Whether the tree is contained by a cgroup.
    pub(crate) fn in_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Cgroup cleanup problems so far.
    pub(crate) fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Whether the leader is the init of a PID namespace of its own.
    pub(crate) fn in_pid_namespace(&self) -> bool {
        self.pid_namespace
    }

    /// A descriptor that becomes readable when the leader exits, when the
    /// kernel supports pidfds.
    pub(crate) fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// Whether the leader has exited, without reaping it.
    pub(crate) fn leader_exited(&self) -> io::Result<bool> {
        // WNOWAIT leaves the child unreaped, so its PID stays reserved.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        Ok(rustix::process::waitid(WaitId::Pid(self.pid), options)?.is_some())
    }

    /// SIGKILL the whole tree; the leader stays unreaped.
    ///
    /// The tree is frozen first (SIGSTOP to the group, then to every other
    /// member found), so no member can fork or orphan its children while it
    /// is being collected; then everything found is killed at once.
    pub(crate) fn kill(&mut self) {
        self.kill_tree(false);
    }

    /// [`Self::kill`] for a leader known to have exited (a zombie cannot
    /// fork). If no PID was allocated in this PID namespace since the
    /// leader's, the leader never had a descendant and the `/proc` sweep is
    /// skipped: the leader's unreaped PID cannot be allocated again, so the
    /// last allocated PID cannot have come back to it.
    pub(crate) fn kill_after_exit(&mut self) {
        self.kill_tree(true);
    }

    fn kill_tree(&mut self, leader_exited: bool) {
        debug_assert!(!self.reaped);
        if self.pid_namespace {
            // The leader is unreaped, so its pid is still this tree's; its
            // death (already, or by this SIGKILL) makes the kernel kill the
            // rest of the namespace (DESIGN §16.7).
            if !leader_exited {
                let _ = rustix::process::kill_process(self.pid, Signal::KILL);
            }
            if let Some(cgroup) = &self.cgroup
                && let Err(error) = cgroup.kill()
            {
                self.problems.push(format!(
                    "cgroup.kill of {} failed: {error}",
                    cgroup.path().display()
                ));
            }
            self.killed = true;
            return;
        }
        if let Some(cgroup) = &self.cgroup {
            let leader = self.pid.as_raw_pid().cast_unsigned();
            if leader_exited {
                settle(cgroup, leader);
            }
            if let Ok(members) = cgroup.members() {
                self.escaped = members
                    .into_iter()
                    .filter(|&pid| pid != leader && process_session(pid) != Some(leader))
                    .collect();
            }
            match cgroup.kill() {
                Ok(()) => {
                    // The leader is unreaped, so the group id still belongs
                    // to this tree.
                    let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
                    // A member that moved out of the cgroup and lost its
                    // parent is an adopted orphan now (DESIGN §16.7).
                    sweep_adopted_since_leader(self.pid.as_raw_pid());
                    self.killed = true;
                    return;
                }
                // Fall back to the process-group sweep below.
                Err(error) => self.problems.push(format!(
                    "cgroup.kill of {} failed: {error}",
                    cgroup.path().display()
                )),
            }
        }
        // The leader is unreaped, so the group id still belongs to this tree.
        let _ = rustix::process::kill_process_group(self.pid, Signal::STOP);
        let leader = self.pid.as_raw_pid();
        let alone = leader_exited && last_allocated_pid() == Some(leader);
        // Orphans of this tree adopted by this process (DESIGN §16.7): every
        // adopted child started since the leader.
        let since = orphans::adopting()
            .then(|| read_stat(leader).map(|stat| stat.start_time))
            .flatten();
        let _guard = since.and_then(|_| orphans::spawn_guard());
        let pinned = if alone {
            Vec::new()
        } else {
            freeze_members(Some(leader), since)
        };
        let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
        for pidfd in &pinned {
            send_signal(pidfd, Signal::KILL);
        }
        wait_for_exit(&pinned);
        orphans::reap_adopted();
        self.killed = true;
    }

    /// Reap the leader, killing the tree first unless [`Self::kill`] already
    /// did since the leader exited.
    pub(crate) fn kill_and_reap(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        if !self.killed {
            self.kill();
        }
        let status = loop {
            match rustix::process::waitpid(Some(self.pid), WaitOptions::empty()) {
                Err(rustix::io::Errno::INTR) => {}
                Ok(Some((_, status))) => break Ok(ExitStatus::from_raw(status.as_raw())),
                Ok(None) => break Err(io::Error::other("the leader was reaped elsewhere")),
                Err(error) => break Err(io::Error::from(error)),
            }
        };
        self.reaped = true;
        if let Ok(status) = &status {
            self.status = Some(*status);
        }
        orphans::unregister(self.pid.as_raw_pid());
        if let Some(mut cgroup) = self.cgroup.take() {
            let problems = cgroup.remove();
            self.problems.extend(problems);
        }
        // Killed members that had been orphaned are this process's children
        // when it adopts orphans (DESIGN §16.7): reap them too.
        orphans::reap_adopted();
        status
    }
}

impl Drop for OwnedTree {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill_and_reap();
        }
    }
}

/// Freeze, kill and reap the children of this process it did not spawn
/// and that started at or after `leader` did (orphans of the command,
/// DESIGN §16.7), when this process adopts orphans.
fn sweep_adopted_since_leader(leader: libc::pid_t) {
    if !orphans::adopting() {
        return;
    }
    if let Some(since) = read_stat(leader).map(|stat| stat.start_time) {
        freeze_and_kill_adopted(since);
    }
    orphans::reap_adopted();
}

/// The PID most recently allocated in this PID namespace.
fn last_allocated_pid() -> Option<libc::pid_t> {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The session id of cgroup member `pid`, if it still exists.
fn process_session(pid: u32) -> Option<u32> {
    let stat = read_stat(libc::pid_t::try_from(pid).ok()?)?;
    u32::try_from(stat.session).ok()
}

/// A pidfd for the process `pid` of a `/proc` scan, if it still exists.
fn open_pidfd(pid: libc::pid_t) -> Option<OwnedFd> {
    rustix::process::pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()
}

pub(super) fn scan() -> HashMap<libc::pid_t, ProcStat> {
    let mut table = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            table.insert(pid, stat);
        }
    }
    table
}

/// Live members of session `leader` and live descendants of those members
/// (or of the leader), and live descendants of `roots` (adopted orphans)
/// and the roots themselves, except the leader itself.
fn members(
    leader: Option<libc::pid_t>,
    table: &HashMap<libc::pid_t, ProcStat>,
    roots: &HashSet<libc::pid_t>,
) -> Vec<(libc::pid_t, u64)> {
    let mut found = Vec::new();
    for (&pid, stat) in table {
        if Some(pid) == leader || !stat.alive {
            continue;
        }
        // Walk the parent chain; bounded by the table size against cycles.
        let mut current_pid = pid;
        let mut current = *stat;
        let mut member = false;
        for _ in 0..=table.len() {
            let of_leader =
                leader.is_some_and(|leader| current.session == leader || current.ppid == leader);
            if of_leader || roots.contains(&current_pid) {
                member = true;
                break;
            }
            match table.get(&current.ppid) {
                Some(parent) if current.ppid > 1 => {
                    current_pid = current.ppid;
                    current = *parent;
                }
                _ => break,
            }
        }
        if member {
            found.push((pid, stat.start_time));
        }
    }
    found
}

/// SIGSTOP every member the scan can find, in rounds, until a round finds
/// no member that is not already pinned. With `since`, the adopted orphans
/// started since then are members too, found afresh each round. Returns
/// the pidfds of the stopped members, each verified to be the scanned
/// process.
fn freeze_members(leader: Option<libc::pid_t>, since: Option<u64>) -> Vec<OwnedFd> {
    let mut pinned: Vec<OwnedFd> = Vec::new();
    let mut seen: HashSet<(libc::pid_t, u64)> = HashSet::new();
    for _ in 0..SWEEP_ROUNDS_MAX {
        let table = scan();
        let roots = since
            .map(|since| orphans::adopted_since(&table, since))
            .unwrap_or_default();
        let fresh: Vec<_> = members(leader, &table, &roots)
            .into_iter()
            .filter(|target| !seen.contains(target))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for (pid, start_time) in fresh {
            let Some(pidfd) = open_pidfd(pid) else {
                continue;
            };
            // The pidfd pins one process; make sure it is the scanned one.
            let same =
                read_stat(pid).is_some_and(|stat| stat.start_time == start_time && stat.alive);
            if same && send_signal(&pidfd, Signal::STOP) {
                seen.insert((pid, start_time));
                pinned.push(pidfd);
            }
        }
    }
    pinned
}

/// Freeze and SIGKILL every adopted orphan started since `since` and its
/// descendants (the program's end, [`orphans::end_adopted_orphans`]);
/// how many were killed.
pub(super) fn freeze_and_kill_adopted(since: u64) -> usize {
    let _guard = orphans::spawn_guard();
    let pinned = freeze_members(None, Some(since));
    for pidfd in &pinned {
        send_signal(pidfd, Signal::KILL);
    }
    wait_for_exit(&pinned);
    pinned.len()
}

/// Cgroup mode, the leader has exited (DESIGN §16.6 Lifetime): wait, at most
/// [`SETTLE_WAIT`], until no other member is running or in an
/// uninterruptible wait, so that a member on its way out of the session
/// (`setsid -f`: fork, the parent exits, the child calls `setsid`) has made
/// that call before the escape verdict is read. A member that blocks, stops
/// or exits has settled; only a member that keeps running costs the wait.
fn settle(cgroup: &ChildCgroup, leader: u32) {
    let until = Instant::now() + SETTLE_WAIT;
    loop {
        let Ok(members) = cgroup.members() else {
            return;
        };
        let running = members.into_iter().filter(|&pid| pid != leader).any(|pid| {
            libc::pid_t::try_from(pid)
                .ok()
                .and_then(read_stat)
                .is_some_and(|stat| !stat.settled)
        });
        if !running || Instant::now() >= until {
            return;
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

fn send_signal(pidfd: &OwnedFd, signal: Signal) -> bool {
    rustix::process::pidfd_send_signal(pidfd, signal).is_ok()
}

/// Wait (bounded) until every pidfd reports that its process exited.
fn wait_for_exit(pidfds: &[OwnedFd]) {
    let deadline = Instant::now() + SWEEP_EXIT_WAIT;
    let mut pending: Vec<BorrowedFd<'_>> = pidfds.iter().map(AsFd::as_fd).collect();
    while !pending.is_empty() {
        let mut fds: Vec<PollFd<'_>> = pending
            .iter()
            .map(|fd| poll::interest(*fd, PollFlags::IN))
            .collect();
        if !matches!(poll::wait_until(&mut fds, deadline), Ok(true)) {
            return;
        }
        pending = pending
            .iter()
            .zip(&fds)
            .filter(|(_, slot)| slot.revents().is_empty())
            .map(|(fd, _)| *fd)
            .collect();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn membership_follows_session_and_parent_chain() {
        let stat = |ppid, session| ProcStat {
            ppid,
            session,
            start_time: 7,
            alive: true,
            settled: true,
        };
        let table = HashMap::from([
            (100, stat(1, 50)), // leader
            (101, stat(100, 100)),
            (102, stat(1, 100)),   // orphan still in the session
            (103, stat(101, 103)), // setsid child of a member
            (104, stat(103, 104)), // grandchild of that
            (105, stat(1, 105)),   // orphaned setsid escapee: not findable
            (200, stat(1, 200)),   // unrelated
        ]);
        let mut found: Vec<_> = members(Some(100), &table, &HashSet::new())
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        found.sort_unstable();
        assert_eq!(found, [101, 102, 103, 104]);
        // An adopted orphan (DESIGN §16.7) is a root: it and its descendants.
        let mut table = table;
        table.insert(106, stat(105, 106));
        let mut found: Vec<_> = members(Some(100), &table, &HashSet::from([105]))
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        found.sort_unstable();
        assert_eq!(found, [101, 102, 103, 104, 105, 106]);
    }
}
