//! Processes under test: contained spawning, bounded waiting, killing and
//! reaping, and `/proc` observations.
//!
//! Every process the runner starts gets a process group of its own, is
//! waited for with a deadline (never forever), and is killed as a group and
//! reaped before its case ends. This module knows nothing about the
//! protocol.
//!
//! Its `/proc/PID/stat` parser ([`stat`], [`all_processes`]) is the
//! repository's only one: the supervision tests of the reference parent use
//! it through the test kit (`quirl-lua-testkit`, `procfs`), because the
//! runner needs it at run time and a product must not depend on a test-only
//! crate.

use rustix::event::{PollFd, PollFlags, Timespec};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Nanoseconds on `CLOCK_MONOTONIC`, comparable between processes of one machine.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// This process's id as a `pid_t`.
pub fn own_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

/// Make this process the reaper of orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`), so that a process a parent under test
/// abandons is re-parented here, where the runner can see it.
pub fn become_subreaper() -> io::Result<()> {
    // Any pid is a non-zero argument, which switches the attribute on.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Reap every zombie child of this process without blocking.
pub fn reap_orphans() -> usize {
    let mut reaped = 0;
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {
        reaped += 1;
    }
    reaped
}

/// Reap one specific child if it is a zombie (never blocks).
pub fn reap_if_zombie(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    matches!(
        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG),
        Ok(Some(_))
    )
}

/// Send SIGKILL to a process group (errors ignored: it may be gone).
pub fn kill_group(pgid: i32) {
    if pgid > 1
        && let Some(pgid) = rustix::process::Pid::from_raw(pgid)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
}

/// Send SIGKILL to one process (errors ignored).
pub fn kill_pid(pid: i32) {
    if pid > 1
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// How a process ended, in words (`exit 0`, `signal 9 (SIGKILL)`).
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit {code}");
    }
    match status.signal() {
        Some(signal) => format!("signal {signal} ({})", signal_name(signal)),
        None => "unknown status".to_owned(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGBUS => "SIGBUS",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

/// A child process in its own process group, with a pidfd when available.
pub struct Contained {
    child: Child,
    pidfd: Option<OwnedFd>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
}

impl Contained {
    /// Spawn `program args…` in a new process group with the given stdio,
    /// this process's environment plus `env`.
    pub fn spawn(
        program: &OsString,
        args: &[OsString],
        env: &[(OsString, OsString)],
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Self> {
        Self::spawn_with(program, args, env, false, [stdin, stdout, stderr])
    }

    /// Like [`Contained::spawn`], with an environment of `env` only.
    pub fn spawn_clean(
        program: &OsString,
        args: &[OsString],
        env: &[(OsString, OsString)],
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
    ) -> io::Result<Self> {
        Self::spawn_with(program, args, env, true, [stdin, stdout, stderr])
    }

    fn spawn_with(
        program: &OsString,
        args: &[OsString],
        env: &[(OsString, OsString)],
        clear_env: bool,
        [stdin, stdout, stderr]: [Stdio; 3],
    ) -> io::Result<Self> {
        let mut command = Command::new(program);
        if clear_env {
            command.env_clear();
        }
        command
            .args(args)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn()?;
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        Ok(Self {
            child,
            pidfd: open_pidfd(pid),
            status: None,
            exited_at: None,
        })
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// Take the child's stdin pipe.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// Take the child's stdout pipe.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// Take the child's stderr pipe.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The pidfd, readable once the process has exited.
    pub fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// Check without blocking whether the process has exited (and reap it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.status = Some(status);
            self.exited_at = Some(Instant::now());
        }
        self.status
    }

    /// When the runner first saw the process exited.
    pub fn exited_at(&self) -> Option<Instant> {
        self.exited_at
    }

    /// Wait until the process exits or `deadline` passes.
    pub fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.try_status() {
                return Some(status);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let left = deadline - now;
            match &self.pidfd {
                Some(fd) => {
                    let _ = poll_readable(&[fd.as_fd()], left);
                }
                None => std::thread::sleep(left.min(Duration::from_millis(2))),
            }
        }
    }

    /// Kill the whole process group, then reap the child. Returns its status.
    ///
    /// The group is killed before the leader is reaped, so its id cannot
    /// have been reused by then.
    pub fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            kill_group(self.pid());
        }
        match self.child.wait() {
            Ok(status) => {
                if self.status.is_none() {
                    self.status = Some(status);
                    self.exited_at = Some(Instant::now());
                }
                self.status
            }
            Err(_) => self.status,
        }
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        // The group may still hold descendants even after the leader exited.
        kill_group(self.pid());
        if self.status.is_none() {
            let _ = self.child.wait();
        }
    }
}

fn open_pidfd(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Wait until one of `fds` is readable (or hung up), or `timeout` passes.
/// Returns the indices that are ready.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<usize>> {
    let interests: Vec<_> = fds.iter().map(|fd| (*fd, PollFlags::IN)).collect();
    wait_ready(&interests, timeout)
}

/// Wait until one descriptor of `interests` is ready for its events (or
/// hung up), or `timeout` passes; EINTR is a spurious wake-up (nothing
/// ready). Returns the indices that are ready.
pub fn wait_ready(
    interests: &[(BorrowedFd<'_>, PollFlags)],
    timeout: Duration,
) -> io::Result<Vec<usize>> {
    let mut polls: Vec<PollFd<'_>> = interests
        .iter()
        .map(|(fd, events)| PollFd::from_borrowed_fd(*fd, *events))
        .collect();
    let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    match rustix::event::poll(&mut polls, Some(&timeout)) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(Vec::new()),
        Err(error) => return Err(error.into()),
    }
    Ok(polls
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.revents().is_empty())
        .map(|(i, _)| i)
        .collect())
}

/// Put a descriptor into non-blocking mode.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Read what is available from a non-blocking descriptor into `out`.
/// Returns `Ok(false)` at end of file.
pub fn drain_nonblocking(file: &mut File, out: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
    let mut chunk = [0_u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(read) => {
                let room = cap.saturating_sub(out.len());
                out.extend_from_slice(&chunk[..read.min(room)]);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
}

/// Write as much of `bytes` as the non-blocking descriptor takes now.
/// Returns the number written; `Err` with `BrokenPipe` when the reader is gone.
pub fn write_nonblocking(file: &mut File, bytes: &[u8]) -> io::Result<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match file.write(&bytes[written..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => written += n,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(written),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(written)
}

/// The fields of `/proc/PID/stat` the suites look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// State letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
    /// Controlling terminal (0 when none).
    pub tty_nr: i64,
    /// Start time in clock ticks after boot (tells reused pids apart).
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process still runs (is neither a zombie nor dead).
    pub fn is_alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Read `/proc/PID/stat`; `None` when the process does not exist.
pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let close = text.rfind(')')?;
    let fields: Vec<&str> = text.get(close + 2..)?.split_ascii_whitespace().collect();
    // Fields after the command name, counting from 0: state(0) ppid(1)
    // pgrp(2) session(3) tty_nr(4) … starttime(19).
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        tty_nr: fields.get(4)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Every process visible in `/proc`.
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

/// The command line of a process, arguments joined by spaces.
pub fn cmdline(pid: i32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect();
    Some(text.join(" "))
}

/// Living processes whose command line contains `marker`.
pub fn living_with_marker(marker: &str) -> Vec<ProcStat> {
    all_processes()
        .into_iter()
        .filter(ProcStat::is_alive)
        .filter(|p| cmdline(p.pid).is_some_and(|line| line.contains(marker)))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn parses_stat_with_spaces_and_parentheses_in_the_name() {
        let text = "42 (a (b) c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
        let stat = parse_stat(42, text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!((stat.ppid, stat.pgrp, stat.session), (1, 42, 42));
        assert_eq!(stat.tty_nr, 0);
        assert_eq!(stat.start_time, 777);
    }

    #[test]
    fn own_stat_is_readable_and_alive() {
        let stat = stat(own_pid()).unwrap();
        assert!(stat.is_alive());
        assert!(stat.start_time > 0);
    }

    #[test]
    fn contained_child_leads_its_own_group_and_is_reaped() {
        let mut child = Contained::spawn(
            &OsString::from("/bin/sh"),
            &[OsString::from("-c"), OsString::from("exit 3")],
            &[],
            Stdio::null(),
            Stdio::null(),
            Stdio::null(),
        )
        .unwrap();
        let status = child
            .wait_until(Instant::now() + Duration::from_secs(10))
            .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(describe_status(status), "exit 3");
    }

    #[test]
    fn kill_and_reap_ends_a_sleeping_child() {
        let mut child = Contained::spawn(
            &OsString::from("/bin/sleep"),
            &[OsString::from("60")],
            &[],
            Stdio::null(),
            Stdio::null(),
            Stdio::null(),
        )
        .unwrap();
        assert_eq!(stat(child.pid()).unwrap().pgrp, child.pid());
        let status = child.kill_and_reap().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(stat(child.pid()).is_none());
    }
}
