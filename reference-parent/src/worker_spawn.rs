//! Spawning a worker in its own session with a sanitized environment and
//! descriptors (SPEC §17.2).
//!
//! A spawned worker gets:
//!
//! - stdin and stderr are pipes to the parent (the protocol channel), stdout
//!   is `/dev/null`;
//! - `setsid()` before `exec` (the `child_setup` module, shared with host
//!   commands): a new session and process group whose id is
//!   the worker's pid, and no controlling terminal (opening `/dev/tty` fails
//!   with `ENXIO`);
//! - `PR_SET_NO_NEW_PRIVS`, so nothing it executes gains privileges through
//!   set-user-id files;
//! - a cleared environment plus the entries its [`WorkerCommand`] declares;
//! - no descriptors beyond 0–2: every descriptor from 3 up is marked
//!   close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`, or a bounded
//!   `fcntl` sweep on kernels without it), including any the host process
//!   opened without `O_CLOEXEC`;
//! - the resource limits of its [`WorkerLimits`] (address space, core,
//!   open files, file size, processes; SPEC §18.1);
//! - in cgroup mode, a cgroup of its own, joined as the first step after the
//!   fork (see the `cgroup` module).
//!
//! The spawned process is handed over as a [`WorkerProcess`], whose
//! kill-and-reap (the `worker_kill` module) ends every path that follows.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags};

use crate::cgroup::{self, ChildCgroup};
use crate::child_setup;
use crate::poll::set_nonblocking;
use crate::rlimits::WorkerLimits;
use crate::signals::children_are_auto_reaped;
use crate::worker_command::WorkerCommand;
use crate::worker_kill::WorkerProcess;

/// A freshly spawned worker and the parent's ends of its two pipes.
pub(crate) struct SpawnedWorker {
    pub(crate) process: WorkerProcess,
    /// Parent → worker (worker stdin), non-blocking.
    pub(crate) input: OwnedFd,
    /// Worker → parent (worker stderr), non-blocking.
    pub(crate) output: OwnedFd,
}

/// Spawn `command` as a contained worker, inside `cgroup` when given.
///
/// On any failure after the process exists, it is killed and reaped (and
/// its cgroup removed) before the error is returned.
pub(crate) fn spawn(
    command: &WorkerCommand,
    limits: &WorkerLimits,
    cgroup: Option<ChildCgroup>,
) -> io::Result<SpawnedWorker> {
    ensure_children_are_not_auto_reaped()?;
    let cgroup_procs = cgroup.as_ref().map(ChildCgroup::procs_fd);
    let mut builder = Command::new(command.program());
    builder
        .args(command.args())
        .env_clear()
        .envs(command.envs())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(dir) = command.dir() {
        builder.current_dir(dir);
    }
    let limits = *limits;
    // SAFETY: `enter_in_child`, `prepare_child` and `apply_in_child` run
    // between fork and exec and only make async-signal-safe system calls
    // (write, setsid, prctl, close_range, prlimit64, fcntl — rustix's raw
    // syscalls or libc's thin wrappers); they allocate nothing and take no
    // locks (`limits` and the descriptor number are plain copies moved into
    // the closure; `cgroup` keeps the descriptor open until `spawn`
    // returns). `pre_exec` itself is `unsafe` because of exactly this
    // requirement; std offers no safe way to run code in the child.
    unsafe {
        builder.pre_exec(move || {
            // First: every later instruction of the child, and the whole
            // program after exec, runs inside the worker's cgroup.
            if let Some(procs) = cgroup_procs {
                cgroup::enter_in_child(procs)?;
            }
            child_setup::enter_new_session_locked_down()?;
            limits.apply_in_child()
        });
    }
    let mut child = builder.spawn()?;
    let pid = Pid::from_child(&child);
    let pipes = take_pipes(&mut child);
    let mut process = WorkerProcess::new(child, pid, cgroup);
    // From here on, dropping `process` kills and reaps the worker.
    let (input, output) = pipes?;
    set_nonblocking(input.as_fd())?;
    set_nonblocking(output.as_fd())?;
    process.set_pidfd(open_pidfd(pid)?);
    Ok(SpawnedWorker {
        process,
        input,
        output,
    })
}

/// The anchor argument (SPEC §17.3) needs the worker to stay unreaped until
/// we reap it. With `SIGCHLD` ignored or `SA_NOCLDWAIT` set, the kernel
/// reaps exited children itself and frees their pids, so refuse to spawn.
fn ensure_children_are_not_auto_reaped() -> io::Result<()> {
    if children_are_auto_reaped()? {
        return Err(io::Error::other(
            "SIGCHLD is ignored (or SA_NOCLDWAIT is set) in this process, so the worker's process group could not be signalled safely",
        ));
    }
    Ok(())
}

fn take_pipes(child: &mut Child) -> io::Result<(OwnedFd, OwnedFd)> {
    let input = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("worker stdin pipe is missing"))?;
    let output = child
        .stderr
        .take()
        .ok_or_else(|| io::Error::other("worker stderr pipe is missing"))?;
    Ok((OwnedFd::from(input), OwnedFd::from(output)))
}

/// `pidfd_open` for our own unreaped child; `None` on kernels without it.
fn open_pidfd(pid: Pid) -> io::Result<Option<OwnedFd>> {
    // `pid` is our unreaped child, so it names exactly that process.
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOSYS) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::poll;
    use std::io::Read;
    use std::time::{Duration, Instant};

    const NO_LIMITS: WorkerLimits = WorkerLimits::NONE;

    fn read_all(output: OwnedFd) -> String {
        // Back to blocking reads: the test reads to end of file.
        rustix::fs::fcntl_setfl(&output, rustix::fs::OFlags::empty()).unwrap();
        let mut text = String::new();
        std::fs::File::from(output)
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    fn sh(script: &str) -> WorkerCommand {
        WorkerCommand::new("/bin/sh").arg("-c").arg(script)
    }

    #[test]
    fn worker_leads_its_own_session_and_group() {
        let spawned = spawn(&sh("exec sleep 30"), &NO_LIMITS, None).unwrap();
        let pid = Pid::from_raw(spawned.process.pid().cast_signed());
        assert_eq!(rustix::process::getpgid(pid).unwrap(), pid.unwrap());
        assert_eq!(rustix::process::getsid(pid).unwrap(), pid.unwrap());
        drop(spawned);
    }

    #[test]
    fn environment_is_cleared_except_declared_entries() {
        let command = sh("env >&2").env("QUIRL_DECLARED", "yes");
        let spawned = spawn(&command, &NO_LIMITS, None).unwrap();
        let SpawnedWorker {
            mut process,
            input,
            output,
        } = spawned;
        drop(input);
        let termination_wait = process.exit_fd().map(|fd| {
            let mut fds = [poll::interest(fd, poll::PollFlags::IN)];
            poll::wait_until(&mut fds, Instant::now() + Duration::from_secs(10)).unwrap()
        });
        assert_eq!(termination_wait, Some(true));
        let text = read_all(output);
        let _ = process.kill_tree_and_reap();
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|line| line.split('=').next())
            .collect();
        names.sort_unstable();
        // sh itself may export PWD (and some shells SHLVL/_); nothing else.
        names.retain(|name| !matches!(*name, "PWD" | "SHLVL" | "_" | "OLDPWD"));
        assert_eq!(names, vec!["QUIRL_DECLARED"], "{text}");
    }

    #[test]
    fn descriptors_beyond_stdio_are_not_inherited() {
        // A descriptor deliberately created without O_CLOEXEC.
        let null = std::fs::File::open("/dev/null").unwrap();
        let leaked = rustix::io::dup(&null).unwrap();
        assert!(std::os::fd::AsRawFd::as_raw_fd(&leaked) > 2);
        let spawned = spawn(&sh("ls /proc/self/fd >&2"), &NO_LIMITS, None).unwrap();
        let SpawnedWorker {
            mut process,
            input,
            output,
        } = spawned;
        drop(input);
        let text = read_all(output);
        let _ = process.kill_tree_and_reap();
        drop(leaked);
        let mut fds: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        fds.sort_unstable();
        // 0-2 plus the one `ls` opens to read the directory.
        assert_eq!(fds.iter().filter(|fd| **fd > 2).count(), 1, "{fds:?}");
        assert_eq!(&fds[..3], &[0, 1, 2]);
    }

    #[test]
    fn the_worker_has_no_controlling_terminal() {
        let spawned = spawn(
            &sh("if (: </dev/tty) 2>/dev/null; then echo tty >&2; else echo none >&2; fi"),
            &NO_LIMITS,
            None,
        )
        .unwrap();
        let SpawnedWorker {
            mut process,
            input,
            output,
        } = spawned;
        drop(input);
        let text = read_all(output);
        let _ = process.kill_tree_and_reap();
        assert_eq!(text.trim(), "none");
    }

    #[test]
    fn spawn_failure_reports_the_os_error() {
        let error = match spawn(
            &WorkerCommand::new("/nonexistent/quirl-worker"),
            &NO_LIMITS,
            None,
        ) {
            Ok(_) => panic!("spawned a missing program"),
            Err(error) => error,
        };
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }
}
