//! Orphans of host commands and workers (DESIGN §16.7), in every
//! containment mode.
//!
//! A host command in a PID namespace of its own never leaves orphans here
//! (its orphans go to its namespace's init); what follows matters for
//! commands where the kernel gives no PID namespace, for a member that left
//! its cgroup, and for descendants of worker processes.
//!
//! A descendant that starts its own session and whose parent exits (a
//! daemon's double fork, `setsid -f`) has no parent chain back to the
//! command, so the `/proc` sweep cannot find it — worse, a group `SIGSTOP`
//! that reached it just before its `setsid` leaves it stopped outside the
//! group the `SIGKILL` goes to. With [`adopt_orphans`] this process becomes
//! the *child subreaper* of everything it starts: such orphans are
//! reparented to it instead of to `init`, so they are its children that it
//! did not spawn. The sweep of a command then also freezes and kills every
//! such adopted child started since the command's leader (and their
//! descendants), and reaps them; [`end_adopted_orphans`] does the same for
//! whatever is left when the program ends (`quirl-lua` calls both).
//!
//! "Spawned here" is a registry of the pids of the workers and command
//! leaders this crate starts, kept from spawn to reap.

use std::collections::HashSet;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Pid, WaitOptions};

use crate::child_process::proc_stat::ProcStat;

static ADOPTING: AtomicBool = AtomicBool::new(false);
static SPAWNED: Mutex<Option<HashSet<libc::pid_t>>> = Mutex::new(None);
/// Held from a spawn to its registration, and by a sweep while it picks and
/// signals adopted children, so a fresh worker or leader is never mistaken
/// for an orphan.
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

/// While adopting: the lock to hold across a spawn and its [`register`],
/// or across a sweep of adopted children.
pub(crate) fn spawn_guard() -> Option<std::sync::MutexGuard<'static, ()>> {
    if !adopting() {
        return None;
    }
    Some(
        SPAWN_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// Make this process the child subreaper of everything it starts, so that
/// descendants of host commands that leave their session and lose their
/// parent are reparented here and killed with the command (DESIGN §16.7).
/// Process-wide and lasting; the `quirl-lua` CLI calls it at start. An
/// embedding program that calls it also receives orphans of children it
/// starts itself; they are reaped, and killed only by
/// [`end_adopted_orphans`] or when started during a host command.
pub fn adopt_orphans() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    ADOPTING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Kill and reap every process adopted by [`adopt_orphans`] (and its
/// descendants), frozen first so none can fork away, in rounds until none
/// is left (at most 10 s). Returns how many were killed. Does nothing unless
/// this process adopts orphans.
pub fn end_adopted_orphans() -> usize {
    if !adopting() {
        return 0;
    }
    // No child at all, alive or exited: nothing was adopted and nothing
    // can be (every descendant has a parent chain through a child), so no
    // `/proc` sweep (which reads every process's stat line).
    if !has_children() {
        return 0;
    }
    let mut killed = 0;
    // Until a scan finds nothing adopted (DESIGN §16.7): an orphan's own
    // children become ours when it dies, and a chain that forks, exits and
    // calls `setsid` every generation is caught within a few rounds, since
    // each round freezes every adopted process it finds before it can fork
    // again. Bounded in time, so a machine that keeps handing orphans over
    // cannot hold the program's exit forever.
    let until = std::time::Instant::now() + END_SWEEP_MAX;
    loop {
        let table = super::tree::scan();
        if adopted_since(&table, 0).is_empty() || std::time::Instant::now() >= until {
            break;
        }
        killed += super::tree::freeze_and_kill_adopted(0);
        reap_adopted();
    }
    reap_adopted();
    killed
}

/// The longest [`end_adopted_orphans`] keeps sweeping.
const END_SWEEP_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// `waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`, which reaps nothing:
/// `Some(true)` if a child has exited and is not yet reaped, `Some(false)`
/// if there are children but none has exited, `None` if there is no child
/// at all (`ECHILD`). Any other failure reads as an exited child, so the
/// callers fall back to their sweep.
fn peek_children() -> Option<bool> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    match waitid(
        WaitId::All,
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    ) {
        Ok(found) => Some(found.is_some()),
        Err(rustix::io::Errno::CHILD) => None,
        Err(_) => Some(true),
    }
}

/// Whether this process has a child, alive or exited.
fn has_children() -> bool {
    peek_children().is_some()
}

/// Whether some child of this process has exited and is not yet reaped.
fn some_child_exited() -> bool {
    peek_children().unwrap_or(false)
}

pub(crate) fn adopting() -> bool {
    ADOPTING.load(Ordering::SeqCst)
}

/// Record a child this crate spawned (a worker or a command leader).
pub(crate) fn register(pid: libc::pid_t) {
    if let Ok(mut spawned) = SPAWNED.lock() {
        spawned.get_or_insert_with(HashSet::new).insert(pid);
    }
}

/// Forget a child once it is reaped.
pub(crate) fn unregister(pid: libc::pid_t) {
    if let Ok(mut spawned) = SPAWNED.lock()
        && let Some(set) = spawned.as_mut()
    {
        set.remove(&pid);
    }
}

fn spawned_here(pid: libc::pid_t) -> bool {
    SPAWNED
        .lock()
        .map(|spawned| spawned.as_ref().is_some_and(|set| set.contains(&pid)))
        .unwrap_or(true)
}

/// Children of this process that it did not spawn (adopted orphans),
/// started at or after `since` (clock ticks since boot, `/proc` start
/// time).
pub(crate) fn adopted_since(
    table: &std::collections::HashMap<libc::pid_t, ProcStat>,
    since: u64,
) -> HashSet<libc::pid_t> {
    if !adopting() {
        return HashSet::new();
    }
    let me = rustix::process::getpid().as_raw_pid();
    table
        .iter()
        .filter(|(pid, stat)| {
            stat.ppid == me && stat.alive && stat.start_time >= since && !spawned_here(**pid)
        })
        .map(|(pid, _)| *pid)
        .collect()
}

/// Reap every adopted child that has exited (never one spawned here: those
/// are reaped by their owners).
pub(crate) fn reap_adopted() {
    // Only an exited child needs reaping: without one, no `/proc` sweep
    // (each sweep reads every process's stat line).
    if !adopting() || !some_child_exited() {
        return;
    }
    let me = rustix::process::getpid().as_raw_pid();
    for (pid, stat) in super::tree::scan() {
        if stat.ppid != me || stat.alive || spawned_here(pid) {
            continue;
        }
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}
