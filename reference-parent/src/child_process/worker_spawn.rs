//! Spawning a worker in its own session with a sanitized environment and
//! descriptors (DESIGN §17.2).
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
//!   open files, file size, processes; DESIGN §18.1);
//! - in cgroup mode, a cgroup of its own, joined as the first step after the
//!   fork (see the `cgroup` module).
//!
//! The child is made by `clone(CLONE_VM | CLONE_VFORK)` (the `vfork_spawn`
//! module), so a start costs the same whatever the host's memory; where
//! `clone` is refused (a seccomp filter returning `ENOSYS`/`EINVAL`/`EPERM`)
//! it falls back to std's `Command` with the same steps in a `pre_exec`
//! hook, i.e. `fork`. Both give the worker the same state (the tests here
//! run both). Host commands (the `process_host` module) keep std's
//! `Command`.
//!
//! The spawned process is handed over as a [`WorkerProcess`], whose
//! kill-and-reap (the `worker_kill` module) ends every path that follows.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, PidfdFlags};

use super::child_setup;
use super::poll::set_nonblocking;
use super::rlimits::WorkerLimits;
use super::signals::children_are_auto_reaped;
use super::vfork_spawn::{self, ChildStdio, ExecPlan};
use super::worker_command::WorkerCommand;
use super::worker_kill::WorkerProcess;
use crate::cgroup::{self, ChildCgroup};

/// A freshly spawned worker and the parent's ends of its two pipes.
pub(crate) struct SpawnedWorker {
    pub(crate) process: WorkerProcess,
    /// Parent → worker (worker stdin), non-blocking.
    pub(crate) input: OwnedFd,
    /// Worker → parent (worker stderr), non-blocking.
    pub(crate) output: OwnedFd,
}

/// How the child process is made (DESIGN §17.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// `clone(CLONE_VM | CLONE_VFORK)` (the `vfork_spawn` module), falling
    /// back to `Fork` where `clone` is refused.
    Vfork,
    /// `std::process::Command` with a `pre_exec` hook, i.e. `fork` (the
    /// fallback itself calls `spawn_by_fork` directly).
    #[cfg_attr(not(test), allow(dead_code, reason = "tests select the fallback"))]
    Fork,
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
    // While this process adopts orphans (DESIGN §16.7), no host-command sweep
    // may take the new worker for one before `WorkerProcess::new` registers
    // it.
    let _guard = crate::process_host::orphans::spawn_guard();
    spawn_by(Method::Vfork, command, limits, cgroup)
}

fn spawn_by(
    method: Method,
    command: &WorkerCommand,
    limits: &WorkerLimits,
    cgroup: Option<ChildCgroup>,
) -> io::Result<SpawnedWorker> {
    ensure_children_are_not_auto_reaped()?;
    let cgroup = match method {
        Method::Vfork => match spawn_by_vfork(command, limits, cgroup)? {
            Ok(spawned) => return Ok(spawned),
            // `clone` is refused here: fall back to `fork`.
            Err(cgroup) => cgroup,
        },
        Method::Fork => cgroup,
    };
    spawn_by_fork(command, limits, cgroup)
}

/// The `vfork_spawn` path; `Ok(Err(cgroup))` hands the cgroup back when
/// `clone` is refused in this process.
fn spawn_by_vfork(
    command: &WorkerCommand,
    limits: &WorkerLimits,
    cgroup: Option<ChildCgroup>,
) -> io::Result<Result<SpawnedWorker, Option<ChildCgroup>>> {
    let plan = ExecPlan::new(command)?;
    let (stdin, input) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
    let (output, stderr) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
    let stdout = rustix::fs::open("/dev/null", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    let stdio = ChildStdio {
        stdin: ChildStdio::above_stdio(stdin)?,
        stdout: ChildStdio::above_stdio(stdout)?,
        stderr: ChildStdio::above_stdio(stderr)?,
    };
    let Some(started) = vfork_spawn::spawn(&plan, &stdio, cgroup.as_ref(), limits)? else {
        return Ok(Err(cgroup));
    };
    // The child's ends stay only in the child.
    drop(stdio);
    let mut process = WorkerProcess::new(started.pid, cgroup);
    // From here on, dropping `process` kills and reaps the worker.
    set_nonblocking(input.as_fd())?;
    set_nonblocking(output.as_fd())?;
    let pidfd = match started.pidfd {
        Some(pidfd) => Some(pidfd),
        None => open_pidfd(started.pid)?,
    };
    process.set_pidfd(pidfd);
    Ok(Ok(SpawnedWorker {
        process,
        input,
        output,
    }))
}

/// The `fork` path: std's `Command` with the same child steps in a
/// `pre_exec` hook. Used where `clone` is refused (and by tests).
fn spawn_by_fork(
    command: &WorkerCommand,
    limits: &WorkerLimits,
    cgroup: Option<ChildCgroup>,
) -> io::Result<SpawnedWorker> {
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
    // `Child` neither waits nor kills on drop: `process` is the worker's
    // only owner from here on.
    drop(child);
    let mut process = WorkerProcess::new(pid, cgroup);
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

/// The anchor argument (DESIGN §17.3) needs the worker to stay unreaped until
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
    use crate::child_process::poll;
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

    /// Spawn `command` by `method`, close its stdin, read its stderr to the
    /// end, then kill and reap it.
    fn run_to_end(method: Method, command: &WorkerCommand) -> String {
        let SpawnedWorker {
            mut process,
            input,
            output,
        } = spawn_by(method, command, &NO_LIMITS, None).unwrap();
        drop(input);
        let text = read_all(output);
        let termination = process.kill_tree_and_reap();
        assert!(
            termination.problems.is_empty(),
            "{:?}",
            termination.problems
        );
        text
    }

    fn spawn_error(method: Method, command: &WorkerCommand) -> io::Error {
        match spawn_by(method, command, &NO_LIMITS, None) {
            Ok(_) => panic!("{method:?}: spawned {command}"),
            Err(error) => error,
        }
    }

    const METHODS: [Method; 2] = [Method::Vfork, Method::Fork];

    #[test]
    fn the_fork_fallback_contains_the_worker_the_same_way() {
        let spawned = spawn_by(Method::Fork, &sh("exec sleep 30"), &NO_LIMITS, None).unwrap();
        let pid = Pid::from_raw(spawned.process.pid().cast_signed()).unwrap();
        assert_eq!(rustix::process::getpgid(Some(pid)).unwrap(), pid);
        assert_eq!(rustix::process::getsid(Some(pid)).unwrap(), pid);
        assert!(spawned.process.exit_fd().is_some());
        drop(spawned);
        let text = run_to_end(Method::Fork, &sh("env >&2").env("QUIRL_DECLARED", "yes"));
        assert!(text.contains("QUIRL_DECLARED=yes"), "{text}");
        assert!(!text.contains("CARGO"), "{text}");
        let text = run_to_end(Method::Fork, &sh("ls /proc/self/fd >&2"));
        let fds: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(fds.iter().filter(|fd| **fd > 2).count(), 1, "{fds:?}");
        let missing = WorkerCommand::new("/nonexistent/quirl-worker");
        assert_eq!(
            spawn_error(Method::Fork, &missing).kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn the_vfork_child_hands_back_a_pidfd() {
        let spawned = spawn(&sh("exec sleep 30"), &NO_LIMITS, None).unwrap();
        let pidfd = spawned.process.exit_fd().expect("a pidfd on Linux >= 5.3");
        // A pidfd names exactly this process: its fdinfo carries the pid.
        let fdinfo = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            std::os::fd::AsRawFd::as_raw_fd(&pidfd)
        ))
        .unwrap();
        assert!(
            fdinfo
                .lines()
                .any(|line| line == format!("Pid:\t{}", spawned.process.pid())),
            "{fdinfo}"
        );
    }

    #[test]
    fn a_program_that_is_not_executable_reports_permission_denied() {
        let path =
            std::env::temp_dir().join(format!("quirl-not-executable-{}", std::process::id()));
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        for method in METHODS {
            let error = spawn_error(method, &WorkerCommand::new(&path));
            assert_eq!(
                error.raw_os_error(),
                Some(libc::EACCES),
                "{method:?}: {error}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_bare_program_is_searched_in_the_declared_path_else_in_bin_and_usr_bin() {
        // No PATH declared: execvp's default search path, as with std.
        let bare = WorkerCommand::new("sh").arg("-c").arg("echo found >&2");
        for method in METHODS {
            assert_eq!(run_to_end(method, &bare).trim(), "found", "{method:?}");
            let nowhere = bare.clone().env("PATH", "/nonexistent");
            let error = spawn_error(method, &nowhere);
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{method:?}: {error}");
        }
    }

    #[test]
    fn a_bad_working_directory_fails_with_the_chdir_error() {
        for method in METHODS {
            let missing = sh("exit 0").current_dir("/nonexistent/quirl-dir");
            let error = spawn_error(method, &missing);
            assert_eq!(
                error.raw_os_error(),
                Some(libc::ENOENT),
                "{method:?}: {error}"
            );
            // A file as the directory: ENOTDIR, which only chdir reports.
            let file = sh("exit 0").current_dir("/proc/self/status");
            let error = spawn_error(method, &file);
            assert_eq!(
                error.raw_os_error(),
                Some(libc::ENOTDIR),
                "{method:?}: {error}"
            );
        }
        let ran = run_to_end(Method::Vfork, &sh("pwd >&2").current_dir("/"));
        assert_eq!(ran.trim(), "/");
    }

    /// `SigBlk`/`SigIgn` of `/proc/self/status` as bit masks.
    fn signal_masks(status: &str) -> (u64, u64) {
        let field = |name: &str| {
            let line = status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {status}"));
            u64::from_str_radix(line.trim(), 16).unwrap()
        };
        (field("SigBlk:"), field("SigIgn:"))
    }

    fn thread_blocks(signal: i32) -> bool {
        // SAFETY: a zeroed sigset_t filled by pthread_sigmask.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask),
                0
            );
            libc::sigismember(&mask, signal) == 1
        }
    }

    fn block_sigusr1(how: libc::c_int) {
        // SAFETY: a sigset_t of the right type, filled by sigemptyset and
        // sigaddset; only the calling test thread's mask changes.
        unsafe {
            let mut usr1: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr1);
            libc::sigaddset(&mut usr1, libc::SIGUSR1);
            assert_eq!(libc::pthread_sigmask(how, &usr1, std::ptr::null_mut()), 0);
        }
    }

    #[test]
    fn the_worker_gets_the_spawning_threads_signal_mask_and_default_sigpipe() {
        // The test runtime ignores SIGPIPE (std does at start-up); the
        // worker must not. The vfork path blocks every signal around the
        // clone; none of that may reach the worker.
        let usr1 = 1_u64 << (libc::SIGUSR1 - 1);
        let pipe = 1_u64 << (libc::SIGPIPE - 1);
        for method in METHODS {
            let status = run_to_end(method, &sh("exec cat /proc/self/status >&2"));
            let (blocked, ignored) = signal_masks(&status);
            assert_eq!(blocked, 0, "{method:?}: {status}");
            assert_eq!(ignored & pipe, 0, "{method:?}: {status}");
            assert!(!thread_blocks(libc::SIGTERM), "{method:?}");
        }
        // A mask the host set is inherited, as by a `fork`ed child, and the
        // host thread's own mask is unchanged afterwards.
        block_sigusr1(libc::SIG_BLOCK);
        for method in METHODS {
            let status = run_to_end(method, &sh("exec cat /proc/self/status >&2"));
            let (blocked, _) = signal_masks(&status);
            assert_eq!(blocked, usr1, "{method:?}: {status}");
            assert!(thread_blocks(libc::SIGUSR1), "{method:?}");
            assert!(!thread_blocks(libc::SIGUSR2), "{method:?}");
        }
        block_sigusr1(libc::SIG_UNBLOCK);
    }

    /// Environment variable that tells the helper test below it was started
    /// by `a_refused_clone_falls_back_to_fork`.
    const REFUSED_CLONE_HELPER: &str = "QUIRL_TEST_REFUSED_CLONE_HELPER";

    /// Deny `clone` with `CLONE_VFORK` (`ENOSYS`) in the calling thread, as
    /// a sandbox's seccomp filter might. Plain `fork` (glibc: `clone`
    /// without `CLONE_VFORK`) stays allowed. Test-only: no architecture
    /// check, the helper process ends with the test.
    fn refuse_vfork_clone_in_this_thread() {
        const fn statement(code: u16, k: u32) -> libc::sock_filter {
            libc::sock_filter {
                code,
                jt: 0,
                jf: 0,
                k,
            }
        }
        const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
            libc::sock_filter { code, jt, jf, k }
        }
        let load = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        let mut program = [
            statement(load, 0), // seccomp_data.nr
            jump(
                (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                u32::try_from(libc::SYS_clone).unwrap(),
                0,
                3,
            ),
            statement(load, 16), // low half of args[0]: the flags
            jump(
                (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16,
                u32::try_from(libc::CLONE_VFORK).unwrap(),
                0,
                1,
            ),
            statement(
                (libc::BPF_RET | libc::BPF_K) as u16,
                libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap(),
            ),
            statement(
                (libc::BPF_RET | libc::BPF_K) as u16,
                libc::SECCOMP_RET_ALLOW,
            ),
        ];
        let filter = libc::sock_fprog {
            len: u16::try_from(program.len()).unwrap(),
            filter: program.as_mut_ptr(),
        };
        rustix::thread::set_no_new_privs(true).unwrap();
        // SAFETY: `filter` points at `program`, alive for the call; the
        // kernel copies the program.
        let done = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const filter,
            )
        };
        assert_eq!(done, 0, "{}", io::Error::last_os_error());
    }

    #[test]
    #[ignore = "helper of a_refused_clone_falls_back_to_fork, run in a process of its own"]
    fn refused_clone_helper() {
        if std::env::var_os(REFUSED_CLONE_HELPER).is_none() {
            eprintln!(
                "refused_clone_helper installs a seccomp filter; it runs only inside a_refused_clone_falls_back_to_fork"
            );
            return;
        }
        refuse_vfork_clone_in_this_thread();
        // The vfork path reports the refusal instead of failing...
        let plan = ExecPlan::new(&sh("exit 0")).unwrap();
        let null = || rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty());
        let stdio = ChildStdio {
            stdin: ChildStdio::above_stdio(null().unwrap()).unwrap(),
            stdout: ChildStdio::above_stdio(null().unwrap()).unwrap(),
            stderr: ChildStdio::above_stdio(null().unwrap()).unwrap(),
        };
        assert!(
            vfork_spawn::spawn(&plan, &stdio, None, &NO_LIMITS)
                .unwrap()
                .is_none()
        );
        // ...and `spawn` falls back to `fork` with the same containment.
        let spawned = spawn(&sh("exec sleep 30"), &NO_LIMITS, None).unwrap();
        let pid = Pid::from_raw(spawned.process.pid().cast_signed()).unwrap();
        assert_eq!(rustix::process::getsid(Some(pid)).unwrap(), pid);
        drop(spawned);
        let text = run_to_end(Method::Vfork, &sh("env >&2").env("QUIRL_DECLARED", "yes"));
        assert!(text.contains("QUIRL_DECLARED=yes"), "{text}");
        // This process's own environment (the helper marker) is not passed.
        assert!(!text.contains(REFUSED_CLONE_HELPER), "{text}");
        println!("fallback spawned and contained a worker");
    }

    #[test]
    fn a_refused_clone_falls_back_to_fork() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process::worker_spawn::tests::refused_clone_helper",
                "--ignored",
                "--nocapture",
            ])
            .env(REFUSED_CLONE_HELPER, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("fallback spawned and contained a worker"),
            "{stdout}\n{stderr}"
        );
        assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
    }

    #[test]
    fn concurrent_spawns_while_other_threads_allocate_keep_their_own_pipes() {
        // Other threads keep the allocator busy (a vfork child must never
        // need its locks) while four threads spawn; every worker must answer
        // on its own pipe and hold no other spawn's pipe end (or its stdin
        // would never reach end of file and `cat` would hang).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let blocks: Vec<Vec<u8>> = (0..64).map(|n| vec![1; 64 + n * 97]).collect();
                        std::hint::black_box(blocks);
                    }
                })
            })
            .collect();
        let spawners: Vec<_> = (0..4)
            .map(|thread| {
                std::thread::spawn(move || {
                    for round in 0..25 {
                        let tag = format!("{thread}-{round}");
                        let text =
                            run_to_end(Method::Vfork, &sh(&format!("cat >&2; echo {tag} >&2")));
                        assert_eq!(text.trim(), tag);
                    }
                })
            })
            .collect();
        for spawner in spawners {
            spawner.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in churn {
            thread.join().unwrap();
        }
    }
}
