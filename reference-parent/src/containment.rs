//! Spawning a worker in its own session, and killing its whole tree safely.
//!
//! # What a spawned worker gets
//!
//! - stdin and stderr are pipes to the parent (the protocol channel), stdout
//!   is `/dev/null`;
//! - `setsid()` before `exec`: a new session and process group whose id is
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
//!   open files, file size, processes; see the `rlimits` module).
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
//! own unreaped anchor, in the sense of Quirl's ADR 0020, without a second
//! helper process. After the reap this module never signals the group again
//! (the state is `Released` and every signalling path checks it). The
//! argument needs the kernel not to reap the worker behind our back, so
//! spawning refuses to run when `SIGCHLD` is ignored or `SA_NOCLDWAIT` is set
//! in the parent process.
//!
//! We also hold a pidfd (`pidfd_open`) for the worker. It is not needed for
//! signalling safety (the anchor argument above is enough) but it gives us
//! an event for "the worker exited": it becomes readable when the worker
//! dies even while a descendant keeps the response pipe open, so a worker
//! that forks a pipe-holding grandchild and exits is noticed at once rather
//! than at the deadline, and the wait for the kill to land is a `poll`, not a
//! sleep loop. The pidfd is a kernel-ordered handle on exactly this process,
//! so waiting on it cannot be confused by pid reuse either.
//!
//! # Cgroup mode (SPEC §17.2)
//!
//! When a writable cgroup v2 hierarchy is available (or required by
//! [`crate::Containment::Cgroup`]), the worker also gets a cgroup of its
//! own (see the `cgroup` module): it joins it as the first step after the
//! fork, `cgroup.kill` precedes the group kill, and the cgroup is emptied
//! and removed after the reap. That reaches every descendant, including one
//! that called `setsid()` and was orphaned.
//!
//! # What is not contained (process-group mode)
//!
//! A descendant that calls `setsid()`/`setpgid()` itself leaves the group and
//! is out of reach of the group kill; if it also holds the response pipe the
//! cleanup reports that as context. Containing such escapes needs a PID
//! namespace or a cgroup (cgroup mode above); the reference worker also
//! forbids `fork` in its own lockdown (see SPEC.md). `PR_SET_PDEATHSIG` is
//! deliberately not used: it fires when the *spawning thread* exits, which
//! would kill pooled workers spawned from short-lived threads. If the whole parent dies, the worker
//! sees EOF on stdin and a conforming worker exits.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cgroup::{self, ChildCgroup};
use crate::command::WorkerCommand;
use crate::poll;
use crate::rlimits::WorkerLimits;

/// How long a killed worker may take to be reported dead by the kernel
/// before the reap is handed to a background thread.
pub(crate) const REAP_WAIT_MAX: Duration = Duration::from_secs(2);

/// A freshly spawned worker and the parent's ends of its two pipes.
pub(crate) struct SpawnedWorker {
    pub(crate) process: WorkerProcess,
    /// Parent → worker (worker stdin), non-blocking.
    pub(crate) input: OwnedFd,
    /// Worker → parent (worker stderr), non-blocking.
    pub(crate) output: OwnedFd,
}

/// An owned, unreaped worker process and its process group.
pub(crate) struct WorkerProcess {
    child: Option<Child>,
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    state: State,
    /// The worker's own cgroup in cgroup mode (SPEC §17.2): killed first,
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
    // (write, setsid, prctl, close_range, getrlimit, setrlimit, fcntl); they
    // allocate nothing and take no locks (`limits` and the descriptor
    // number are plain copies moved into the closure; `cgroup` keeps the
    // descriptor open until `spawn` returns).
    unsafe {
        builder.pre_exec(move || {
            // First: every later instruction of the child, and the whole
            // program after exec, runs inside the worker's cgroup.
            if let Some(procs) = cgroup_procs {
                cgroup::enter_in_child(procs)?;
            }
            prepare_child()?;
            limits.apply_in_child()
        });
    }
    let mut child = builder.spawn()?;
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(io::Error::other("worker pid is outside the platform range"));
    };
    let mut process = WorkerProcess {
        pid,
        pidfd: None,
        state: State::Owned,
        child: None,
        cgroup,
    };
    let pipes = take_pipes(&mut child);
    process.child = Some(child);
    // From here on, dropping `process` kills and reaps the worker.
    let (input, output) = pipes?;
    set_nonblocking(input.as_fd())?;
    set_nonblocking(output.as_fd())?;
    process.pidfd = open_pidfd(pid)?;
    Ok(SpawnedWorker {
        process,
        input,
        output,
    })
}

/// The anchor argument needs the worker to stay unreaped until we reap it.
/// With `SIGCHLD` ignored or `SA_NOCLDWAIT` set, the kernel reaps exited
/// children itself and frees their pids, so refuse to spawn at all.
fn ensure_children_are_not_auto_reaped() -> io::Result<()> {
    // SAFETY: all-zero is valid storage for the query.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: null new action = query only.
    if unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), &raw mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if current.sa_sigaction == libc::SIG_IGN || current.sa_flags & libc::SA_NOCLDWAIT != 0 {
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

/// Runs in the child between `fork` and `exec`.
fn prepare_child() -> io::Result<()> {
    // SAFETY: setsid takes no arguments. The forked child is not a group
    // leader, so this succeeds unless the kernel refuses.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    mark_inherited_descriptors_cloexec()
}

fn mark_inherited_descriptors_cloexec() -> io::Result<()> {
    // SAFETY: close_range with integer arguments; CLOSE_RANGE_CLOEXEC only
    // sets flags, so std's exec-error pipe keeps working until exec.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3_u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return Ok(());
    }
    // Kernel before 5.11: sweep up to the descriptor limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let end = libc::c_int::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20);
    for fd in 3..end {
        // SAFETY: fcntl on a possibly closed descriptor just fails with EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            // SAFETY: as above.
            unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
        }
    }
    Ok(())
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; results checked.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `pidfd_open` for our own unreaped child; `None` on kernels without it.
fn open_pidfd(pid: libc::pid_t) -> io::Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open with integer arguments. `pid` is our unreaped child,
    // so it names exactly that process.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ENOSYS) {
            return Ok(None);
        }
        return Err(error);
    }
    let raw = libc::c_int::try_from(raw).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: the kernel returned a fresh descriptor (close-on-exec) we own.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(raw) }))
}

impl WorkerProcess {
    /// The worker's pid (also its process-group and session id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid.cast_unsigned()
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
        if self.state == State::Owned
            && let Some(cgroup) = &self.cgroup
            && let Err(error) = cgroup.kill()
        {
            problems.push(format!(
                "cgroup.kill of {} failed: {error}",
                cgroup.path().display()
            ));
        }
        if self.state == State::Owned {
            // SAFETY: kill with integer arguments. The group id is our
            // unreaped child's pid (see the module docs).
            let group = unsafe { libc::kill(-self.pid, libc::SIGKILL) };
            self.state = State::Signalled;
            if group < 0 {
                let error = io::Error::last_os_error();
                problems.push(format!(
                    "process-group kill of {} failed: {error}",
                    self.pid
                ));
                if let Some(child) = self.child.as_mut()
                    && let Err(error) = child.kill()
                {
                    problems.push(format!(
                        "direct kill of worker {} failed: {error}",
                        self.pid
                    ));
                }
            }
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
        Termination { status, problems }
    }

    fn remove_cgroup(&mut self, problems: &mut Vec<String>) {
        if let Some(mut cgroup) = self.cgroup.take() {
            problems.extend(cgroup.remove());
        }
    }

    fn reap(&mut self, problems: &mut Vec<String>) -> Option<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            self.state = State::Released;
            return None;
        };
        if let Some(pidfd) = self.pidfd.as_ref() {
            let mut fds = [poll::interest(pidfd.as_fd(), libc::POLLIN)];
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
                    self.pid
                ));
                self.state = State::Released;
                let _ = std::thread::Builder::new()
                    .name("quirl-lua-late-reaper".to_owned())
                    .spawn(move || child.wait());
                return None;
            }
        }
        self.state = State::Released;
        match child.wait() {
            Ok(status) => Some(status),
            Err(error) => {
                problems.push(format!("reaping worker {} failed: {error}", self.pid));
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
/// means for a locked-down worker.
fn signal_suffix(signal: i32) -> String {
    let name = match signal {
        libc::SIGSYS => {
            return " (SIGSYS: a system call outside the worker's seccomp allowlist)".to_owned();
        }
        libc::SIGKILL => "SIGKILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "SIGPIPE",
        _ => return String::new(),
    };
    format!(" ({name})")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const NO_LIMITS: WorkerLimits = WorkerLimits::NONE;

    fn read_all(output: OwnedFd) -> String {
        use std::io::Read;
        // SAFETY: fcntl on a descriptor we own; clears O_NONBLOCK.
        unsafe { libc::fcntl(output.as_raw_fd(), libc::F_SETFL, 0) };
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
        let pid = spawned.process.pid().cast_signed();
        // SAFETY: integer arguments.
        let (pgid, sid) = unsafe { (libc::getpgid(pid), libc::getsid(pid)) };
        assert_eq!(pgid, pid);
        assert_eq!(sid, pid);
        drop(spawned);
    }

    #[test]
    fn kill_reaps_the_worker_and_is_idempotent() {
        let mut spawned = spawn(&sh("exec sleep 30"), &NO_LIMITS, None).unwrap();
        let first = spawned.process.kill_tree_and_reap();
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        assert_eq!(first.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
        assert_eq!(spawned.process.state, State::Released);
        let second = spawned.process.kill_tree_and_reap();
        assert!(second.status.is_none());
        assert!(second.problems.is_empty());
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
            let mut fds = [poll::interest(fd, libc::POLLIN)];
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
        // SAFETY: dup returns a new descriptor without FD_CLOEXEC; checked.
        let leaked = unsafe { libc::dup(null.as_raw_fd()) };
        assert!(leaked > 2);
        let spawned = spawn(&sh("ls /proc/self/fd >&2"), &NO_LIMITS, None).unwrap();
        let SpawnedWorker {
            mut process,
            input,
            output,
        } = spawned;
        drop(input);
        let text = read_all(output);
        let _ = process.kill_tree_and_reap();
        // SAFETY: closing the descriptor dup'ed above, which we own.
        unsafe { libc::close(leaked) };
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
