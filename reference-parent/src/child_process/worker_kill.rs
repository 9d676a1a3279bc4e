//! Killing a worker's whole tree and reaping it, in the order that cannot
//! hit a stranger (DESIGN §17.3, §17.4 steps 2–5).
//!
//! # Why the process-group kill cannot hit a stranger (PID/PGID reuse)
//!
//! The worker is a session leader, so its process-group id equals its pid
//! and it can never leave that group (`setpgid` on a session leader fails
//! with `EPERM`). The parent is the worker's parent and does not reap it
//! until the single group `SIGKILL` has been sent. An unreaped process —
//! alive or zombie — keeps its pid allocated, and a new process group can
//! only be created with the pid of its creator, so while the worker is
//! unreaped no other process group can carry that number: the worker is its
//! own unreaped anchor (DESIGN §17.3), without a second
//! helper process. After the reap this module never signals the group again
//! (the state is `Released` and every signalling path checks it). The
//! argument needs the kernel not to reap the worker behind our back, so
//! spawning (the `worker_spawn` module) refuses to run when `SIGCHLD` is
//! ignored or `SA_NOCLDWAIT` is set in the parent process.
//!
//! We also hold a pidfd for the worker (from `CLONE_PIDFD`, or
//! `pidfd_open` on the `fork` fallback). It is not needed for
//! signalling safety (the anchor argument above is enough) but it gives us
//! an event for "the worker exited": it becomes readable when the worker
//! dies even while a descendant keeps the response pipe open, so a worker
//! that forks a pipe-holding grandchild and exits is noticed at once rather
//! than at the deadline, and the wait for the kill to land is a `poll`, not a
//! sleep loop. The pidfd is a kernel-ordered handle on exactly this process,
//! so waiting on it cannot be confused by pid reuse either.
//!
//! # Cgroup mode (DESIGN §17.2)
//!
//! When the worker has a cgroup of its own (see the `cgroup` module),
//! `cgroup.kill` precedes the group kill, and the cgroup is emptied and
//! removed after the reap. That reaches every descendant, including one
//! that called `setsid()` and was orphaned.
//!
//! # What is not contained (process-group mode)
//!
//! A descendant that calls `setsid()`/`setpgid()` itself leaves the group and
//! is out of reach of the group kill; if it also holds the response pipe the
//! cleanup reports that as context. Containing such escapes needs a PID
//! namespace or a cgroup (cgroup mode above); the reference worker also
//! forbids `fork` in its own lockdown (DESIGN §18.3). `PR_SET_PDEATHSIG` is
//! deliberately not used: it fires when the *spawning thread* exits, which
//! would kill pooled workers spawned from short-lived threads. If the whole
//! parent dies, the worker sees EOF on stdin and a conforming worker exits.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::poll::{self, PollFlags};
use super::signals::signal_name;
use crate::cgroup::ChildCgroup;

/// How long a killed worker may take to be reported dead by the kernel
/// before the reap is handed to a background thread.
pub(crate) const REAP_WAIT_MAX: Duration = Duration::from_secs(2);

/// An owned, unreaped worker process and its process group.
pub(crate) struct WorkerProcess {
    /// The worker's pid while it is ours to reap (`None` once reaped or
    /// handed to the background reaper).
    unreaped: Option<Pid>,
    pid: Pid,
    pidfd: Option<OwnedFd>,
    state: State,
    /// The worker's own cgroup in cgroup mode (DESIGN §17.2): killed first,
    /// removed after the reap.
    cgroup: Option<ChildCgroup>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Unreaped; the group id is pinned and may be signalled.
    Owned,
    /// The single group kill was sent; still unreaped.
    Signalled,
    /// Reaped (or handed to the background reaper): never signal again.
    Released,
}

/// The outcome of [`WorkerProcess::kill_tree_and_reap`].
#[derive(Debug)]
pub(crate) struct Termination {
    /// The worker's wait status, if it was reaped here.
    pub(crate) status: Option<ExitStatus>,
    /// Cleanup problems, each a sentence for an error's context.
    pub(crate) problems: Vec<String>,
}

impl WorkerProcess {
    /// Take ownership of a just-spawned, unreaped child of this process
    /// (`pid` is its pid, also its process-group id). From here on this
    /// value is the only thing that waits for it.
    pub(crate) fn new(pid: Pid, cgroup: Option<ChildCgroup>) -> Self {
        crate::process_host::orphans::register(pid.as_raw_pid());
        Self {
            unreaped: Some(pid),
            pid,
            pidfd: None,
            state: State::Owned,
            cgroup,
        }
    }

    /// Attach the worker's pidfd (`None` on kernels without pidfds).
    pub(crate) fn set_pidfd(&mut self, pidfd: Option<OwnedFd>) {
        self.pidfd = pidfd;
    }

    /// The worker's pid (also its process-group and session id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid.as_raw_pid().cast_unsigned()
    }

    /// A descriptor that becomes readable when the worker exits, if the
    /// kernel supports pidfds.
    pub(crate) fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        match self.state {
            State::Released => None,
            State::Owned | State::Signalled => self.pidfd.as_ref().map(AsFd::as_fd),
        }
    }

    /// Kill the worker's cgroup (in cgroup mode) and process group, then
    /// reap the worker and remove its cgroup.
    ///
    /// Order matters: `cgroup.kill` (every member, whatever its session),
    /// exactly one group `SIGKILL` while the worker is unreaped (its pid
    /// pins the group id), a direct kill of the worker as a fallback if the
    /// group signal failed, then the reap, then the cgroup is emptied and
    /// removed. After this returns the group is never addressed again.
    /// Idempotent.
    pub(crate) fn kill_tree_and_reap(&mut self) -> Termination {
        let mut problems = Vec::new();
        if self.state == State::Owned {
            self.kill_tree(&mut problems);
        }
        if self.state == State::Released {
            self.remove_cgroup(&mut problems);
            return Termination {
                status: None,
                problems,
            };
        }
        let status = self.reap(&mut problems);
        self.remove_cgroup(&mut problems);
        // The worker's orphaned descendants, adopted (DESIGN §16.7).
        crate::process_host::orphans::reap_adopted();
        Termination { status, problems }
    }

    /// `cgroup.kill`, then the one group `SIGKILL` (DESIGN §17.4 steps 2–3).
    fn kill_tree(&mut self, problems: &mut Vec<String>) {
        if let Some(cgroup) = &self.cgroup
            && let Err(error) = cgroup.kill()
        {
            problems.push(format!(
                "cgroup.kill of {} failed: {error}",
                cgroup.path().display()
            ));
        }
        // The group id is our unreaped child's pid (see the module docs).
        let group = rustix::process::kill_process_group(self.pid, Signal::KILL);
        self.state = State::Signalled;
        if let Err(error) = group {
            problems.push(format!(
                "process-group kill of {} failed: {}",
                self.pid.as_raw_pid(),
                io::Error::from(error)
            ));
            if let Some(pid) = self.unreaped
                && let Err(error) = rustix::process::kill_process(pid, Signal::KILL)
            {
                let error = io::Error::from(error);
                problems.push(format!(
                    "direct kill of worker {} failed: {error}",
                    self.pid.as_raw_pid()
                ));
            }
        }
    }

    fn remove_cgroup(&mut self, problems: &mut Vec<String>) {
        if let Some(mut cgroup) = self.cgroup.take() {
            problems.extend(cgroup.remove());
        }
    }

    fn reap(&mut self, problems: &mut Vec<String>) -> Option<ExitStatus> {
        let Some(pid) = self.unreaped.take() else {
            self.state = State::Released;
            return None;
        };
        if let Some(pidfd) = self.pidfd.as_ref() {
            let mut fds = [poll::interest(pidfd.as_fd(), PollFlags::IN)];
            let exited = poll::wait_until(&mut fds, Instant::now() + REAP_WAIT_MAX);
            if !matches!(exited, Ok(true)) {
                let why = match exited {
                    Err(error) => format!("waiting for it failed: {error}"),
                    Ok(_) => format!(
                        "it was still running {} ms after SIGKILL",
                        REAP_WAIT_MAX.as_millis()
                    ),
                };
                problems.push(format!(
                    "worker {} was not reaped in time ({why}); a background thread reaps it",
                    self.pid.as_raw_pid()
                ));
                self.state = State::Released;
                let _ = std::thread::Builder::new()
                    .name("quirl-lua-late-reaper".to_owned())
                    .spawn(move || {
                        let _ = wait_for(pid);
                        crate::process_host::orphans::unregister(pid.as_raw_pid());
                    });
                return None;
            }
        }
        self.state = State::Released;
        let reaped = wait_for(pid);
        crate::process_host::orphans::unregister(pid.as_raw_pid());
        match reaped {
            Ok(status) => Some(status),
            Err(error) => {
                problems.push(format!(
                    "reaping worker {} failed: {error}",
                    self.pid.as_raw_pid()
                ));
                None
            }
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.kill_tree_and_reap();
    }
}

/// Block until our child `pid` ends and reap it (`waitpid`, retried on
/// `EINTR`). `pid` must be an unreaped child of this process that nothing
/// else waits for.
fn wait_for(pid: Pid) -> io::Result<ExitStatus> {
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(ExitStatus::from_raw(status.as_raw())),
            Ok(None) => {
                return Err(io::Error::other(format!(
                    "waitpid for worker {} returned no status",
                    pid.as_raw_pid()
                )));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
}

impl Termination {
    /// What the supervision core is told of it (DESIGN §17.4).
    pub(crate) fn into_end(self) -> crate::supervision::classify::WorkerEnd {
        crate::supervision::classify::WorkerEnd {
            exited_zero: self.status.is_some_and(|status| status.success()),
            status: self.status.map(describe_status),
            problems: self.problems,
        }
    }
}

/// A sentence describing a wait status, e.g. `exited with status 0`.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(signal) = status.signal() {
        let core = if status.core_dumped() {
            " (core dumped)"
        } else {
            ""
        };
        format!(
            "was killed by signal {signal}{}{core}",
            signal_suffix(signal)
        )
    } else {
        format!("ended with wait status {status}")
    }
}

/// ` (SIGSYS: …)` and the like: the signal's name, and for `SIGSYS` what it
/// means for a locked-down worker (DESIGN §18.3).
fn signal_suffix(signal: i32) -> String {
    if signal == libc::SIGSYS {
        return " (SIGSYS: a system call outside the worker's seccomp allowlist)".to_owned();
    }
    signal_name(signal).map_or_else(String::new, |name| format!(" ({name})"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::child_process::rlimits::WorkerLimits;
    use crate::child_process::worker_command::WorkerCommand;
    use crate::child_process::worker_spawn::spawn;

    #[test]
    fn kill_reaps_the_worker_and_is_idempotent() {
        let command = WorkerCommand::new("/bin/sh").arg("-c").arg("exec sleep 30");
        let mut spawned = spawn(&command, &WorkerLimits::NONE, None).unwrap();
        let first = spawned.process.kill_tree_and_reap();
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        assert_eq!(first.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
        assert_eq!(spawned.process.state, State::Released);
        let second = spawned.process.kill_tree_and_reap();
        assert!(second.status.is_none());
        assert!(second.problems.is_empty());
    }

    #[test]
    fn describes_exit_codes_and_signals() {
        assert_eq!(
            describe_status(ExitStatus::from_raw(0)),
            "exited with status 0"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "was killed by signal 9 (SIGKILL)"
        );
        assert!(describe_status(ExitStatus::from_raw(libc::SIGSYS)).contains("(SIGSYS: "));
    }
}
