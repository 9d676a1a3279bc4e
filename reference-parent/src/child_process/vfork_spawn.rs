//! Starting a worker process without copying the parent's page tables: a
//! `clone(CLONE_VM | CLONE_VFORK)` child that applies the worker's
//! containment and `exec`s it (DESIGN §17.2 "How the worker process is made").
//!
//! `std::process::Command` with a `pre_exec` hook uses `fork()`, which copies
//! the page tables of the whole parent: the cost of every worker start grows
//! with the host's memory (BENCHMARKS.md, "Cold start breakdown"). A
//! `CLONE_VM | CLONE_VFORK` child shares the parent's memory instead, and the
//! parent thread sleeps until the child has called `execve` or exited — the
//! technique of glibc's `posix_spawn` and Go's `forkExec`. In cgroup mode on
//! x86-64 the child is made by `clone3` with `CLONE_INTO_CGROUP`, so it is
//! born inside its cgroup; elsewhere (or where `clone3` is refused) glibc's
//! `clone` makes it and it writes `cgroup.procs` first.
//!
//! Why this is our own `unsafe` code: std has no hook for a vfork-style
//! child (any `pre_exec` turns `posix_spawn` off), rustix has no `clone`,
//! and `posix_spawn` cannot enter a cgroup, set `no_new_privs` or set
//! resource limits.
//!
//! The rules the child follows, because it runs on the parent's memory
//! while other parent threads keep running: everything it reads was built
//! by the parent before the clone ([`ExecPlan`], the descriptors); it makes
//! system calls only (no allocation, no locks, no panics: the entry is an
//! `extern "C" fn` and every step returns an errno); it runs on a stack of
//! its own (mapped here, with a guard page); its first act is to reset
//! every signal handler to the default, so a signal can never run a parent
//! handler on shared memory (the parent blocks all signals around the clone,
//! as glibc's `posix_spawn` does); it reports a failure by storing the step
//! and errno into the [`ChildReport`] in the parent's memory, then
//! `_exit(127)`.

use std::collections::BTreeMap;
use std::ffi::{CString, c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::io::Errno;
use rustix::process::{Pid, WaitOptions};

use super::child_setup::{self, ChildStack, SignalsBlocked};
use super::rlimits::WorkerLimits;
use super::worker_command::WorkerCommand;
use crate::cgroup::{self, ChildCgroup};

/// The search path of `execvp` when the environment has no `PATH` (glibc's
/// `_CS_PATH`), as std's `Command` uses it after `env_clear`.
const DEFAULT_SEARCH_PATH: &[u8] = b"/bin:/usr/bin";

/// Everything `execve` needs, as NUL-terminated arrays built before the
/// clone (the child cannot allocate).
pub(crate) struct ExecPlan {
    /// Paths to try in order: the program itself if it contains a `/`,
    /// otherwise one per directory of the search path (`execvp` rules).
    candidates: Vec<CString>,
    /// The strings the pointer arrays point into (moving a `CString` does
    /// not move its bytes), kept alive as long as the pointers.
    #[cfg_attr(not(test), allow(dead_code, reason = "owns what argv_ptrs points to"))]
    argv: Vec<CString>,
    #[cfg_attr(not(test), allow(dead_code, reason = "owns what envp_ptrs points to"))]
    envp: Vec<CString>,
    /// Null-terminated pointer arrays into `argv` and `envp`.
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    cwd: Option<CString>,
}

impl ExecPlan {
    /// The program, arguments, environment (cleared except the declared
    /// entries; a later entry of the same name wins, as with
    /// `Command::env_clear().envs(..)`) and working directory of `command`.
    pub(crate) fn new(command: &WorkerCommand) -> io::Result<Self> {
        let program = command.program().as_os_str().as_bytes();
        let mut env = BTreeMap::new();
        for (key, value) in command.envs() {
            env.insert(key.as_bytes(), value.as_bytes());
        }
        let candidates = search_candidates(program, env.get(&b"PATH"[..]).copied())?;
        let mut argv = vec![c_string(program)?];
        for arg in command.args() {
            argv.push(c_string(arg.as_bytes())?);
        }
        let envp = env
            .iter()
            .map(|(key, value)| c_string(&[*key, b"=", *value].concat()))
            .collect::<io::Result<Vec<_>>>()?;
        let cwd = command
            .dir()
            .map(|dir| c_string(dir.as_os_str().as_bytes()))
            .transpose()?;
        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        Ok(Self {
            candidates,
            argv,
            envp,
            argv_ptrs,
            envp_ptrs,
            cwd,
        })
    }
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

/// The paths `execvp` would try for `program` with `path` as the child's
/// `PATH`: the program alone if it contains a `/`, else `dir/program` for
/// every directory (an empty one meaning the working directory).
fn search_candidates(program: &[u8], path: Option<&[u8]>) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains(&b'/') {
        return Ok(vec![c_string(program)?]);
    }
    path.unwrap_or(DEFAULT_SEARCH_PATH)
        .split(|byte| *byte == b':')
        .map(|dir| {
            if dir.is_empty() {
                c_string(program)
            } else {
                c_string(&[dir, b"/", program].concat())
            }
        })
        .collect()
}

/// The descriptors the child puts on 0, 1 and 2, all numbered 3 or above
/// (so no `dup2` of one overwrites another) and close-on-exec in the parent.
pub(crate) struct ChildStdio {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

impl ChildStdio {
    /// Renumber `fd` to 3 or above if it is one of 0–2 (possible when the
    /// host runs with a standard descriptor closed).
    pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
        child_setup::above_stdio(fd)
    }
}

/// A process started by [`spawn`]; `pid` is an unreaped child of ours.
pub(crate) struct Started {
    pub(crate) pid: Pid,
    /// From `CLONE_PIDFD`; `None` on kernels before 5.2.
    pub(crate) pidfd: Option<OwnedFd>,
    /// How it entered its cgroup.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the tests"))]
    pub(crate) entered: Entered,
}

/// How a started child entered its cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entered {
    /// No cgroup was asked for.
    None,
    /// `clone3` made it a member (CLONE_INTO_CGROUP).
    AtClone,
    /// The child wrote `cgroup.procs` before `exec`.
    BeforeExec,
}

/// Which step of the child failed (reported with its errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
enum Step {
    None = 0,
    SignalMask,
    Stdio,
    Cgroup,
    Session,
    Limits,
    Chdir,
    Exec,
}

impl Step {
    fn from_raw(raw: i32) -> Self {
        [
            Self::SignalMask,
            Self::Stdio,
            Self::Cgroup,
            Self::Session,
            Self::Limits,
            Self::Chdir,
            Self::Exec,
        ]
        .into_iter()
        .find(|step| *step as i32 == raw)
        .unwrap_or(Self::None)
    }
}

/// Where the child reports a failed step; lives in the parent's memory,
/// which the child shares (`CLONE_VM`).
struct ChildReport {
    step: AtomicI32,
    errno: AtomicI32,
}

/// What the child reads: prepared by the parent, read-only for the child
/// except `report`.
struct ChildContext<'a> {
    plan: &'a ExecPlan,
    stdio: [BorrowedFd<'a>; 3],
    cgroup_procs: Option<RawFd>,
    limits: WorkerLimits,
    /// Highest signal number (`SIGRTMAX`), read in the parent.
    signal_max: c_int,
    /// The spawning thread's signal mask before it blocked everything: the
    /// worker's mask, as a `fork`ed child inherits it.
    parent_mask: libc::sigset_t,
    report: ChildReport,
}

/// Start `plan` in a `CLONE_VM | CLONE_VFORK` child with `stdio` on 0–2,
/// entering the cgroup whose `cgroup.procs` is `cgroup_procs` first, in a
/// new session with `no_new_privs`, no inherited descriptor beyond 0–2, and
/// `limits` (DESIGN §17.2, §18.1).
///
/// `Ok(None)`: `clone` itself is refused here (`ENOSYS`, `EINVAL`, `EPERM`,
/// e.g. under a seccomp filter); the caller falls back to `fork`. A failed
/// step in the child is the step's OS error, after the child was reaped.
pub(crate) fn spawn(
    plan: &ExecPlan,
    stdio: &ChildStdio,
    cgroup: Option<&ChildCgroup>,
    limits: &WorkerLimits,
) -> io::Result<Option<Started>> {
    let stack = ChildStack::map()?;
    let blocked = SignalsBlocked::all()?;
    let mut context = ChildContext {
        plan,
        stdio: [
            stdio.stdin.as_fd(),
            stdio.stdout.as_fd(),
            stdio.stderr.as_fd(),
        ],
        cgroup_procs: cgroup.map(ChildCgroup::procs_fd),
        limits: *limits,
        signal_max: libc::SIGRTMAX(),
        parent_mask: blocked.previous,
        report: ChildReport {
            step: AtomicI32::new(Step::None as i32),
            errno: AtomicI32::new(0),
        },
    };
    let mut pidfd: c_int = -1;
    let mut entered = Entered::None;
    let mut pid = -1;
    if let Some(cgroup) = cgroup {
        // First choice: `clone3` starts the child inside the cgroup, so it
        // skips the `cgroup.procs` write, whose migration waits for an RCU
        // grace period in the kernel (BENCHMARKS.md, X3).
        context.cgroup_procs = None;
        pid = clone3_into_cgroup(&context, &stack, cgroup.dir_fd(), &mut pidfd);
        if pid >= 0 {
            entered = Entered::AtClone;
        } else {
            // Refused (no `clone3` or no CLONE_INTO_CGROUP here, a seccomp
            // filter, an architecture without the trampoline): the child
            // enters by writing `cgroup.procs` instead.
            context.cgroup_procs = Some(cgroup.procs_fd());
            pidfd = -1;
        }
    }
    if pid < 0 {
        pid = clone_vfork(&context, &stack, &mut pidfd);
        if pid >= 0 && cgroup.is_some() {
            entered = Entered::BeforeExec;
        }
    }
    let clone_error = io::Error::last_os_error();
    drop(blocked);
    drop(stack);
    if pid < 0 {
        return match clone_error.raw_os_error() {
            Some(libc::ENOSYS | libc::EINVAL | libc::EPERM) => Ok(None),
            _ => Err(clone_error),
        };
    }
    let pidfd = (pidfd >= 0).then(|| {
        // SAFETY: the kernel just created this descriptor for us
        // (CLONE_PIDFD); nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(pidfd) }
    });
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("clone returned pid 0"))?;
    let step = Step::from_raw(context.report.step.load(Ordering::Acquire));
    if step == Step::None {
        return Ok(Some(Started {
            pid,
            pidfd,
            entered,
        }));
    }
    let errno = context.report.errno.load(Ordering::Acquire);
    // The child has exited (`_exit(127)`); reap it so no zombie is left.
    drop(pidfd);
    reap(pid);
    // The plain OS error, as a `Command` spawn reports it (the step is
    // implied by the errno and kept out of the error's kind).
    Err(io::Error::from_raw_os_error(errno))
}

/// glibc's `clone` with CLONE_VM | CLONE_VFORK | CLONE_PIDFD: the child runs
/// `child_main(context)` on `stack`. Returns the pid, or -1 with `errno`.
fn clone_vfork(context: &ChildContext<'_>, stack: &ChildStack, pidfd: &mut c_int) -> c_int {
    // SAFETY: `child_main` runs on `stack` (a fresh mapping that outlives the
    // child's use of it: CLONE_VFORK suspends this thread until the child
    // has exec'd or exited, and `stack` is unmapped only after that) and
    // reads `context`, which lives in this frame for the same reason. The
    // child follows the module's rules (system calls only, no allocation,
    // no locks, no unwinding). Signals are blocked in this thread, so no
    // handler runs in the child before it resets the dispositions. With
    // CLONE_PIDFD the kernel writes the new pidfd into `pidfd` (the
    // `parent_tid` argument) before `clone` returns. Unlike `vfork()`, glibc's
    // `clone` does not return twice: the child runs `child_main` on its own
    // stack and never comes back into this frame, so nothing of this
    // function's stack is used by two processes.
    unsafe {
        libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            ptr::from_ref(context).cast_mut().cast::<c_void>(),
            ptr::from_mut(pidfd),
        )
    }
}

/// `CLONE_INTO_CGROUP` (linux/sched.h, Linux 5.7): a `clone3` flag only.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of linux/sched.h up to its `cgroup` field
/// (`CLONE_ARGS_SIZE_VER2`, 88 bytes); the kernel reads `size_of` bytes.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `clone3` with CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP:
/// the child starts as a member of the cgroup open as `cgroup_dir` and runs
/// `child_main(context)` on `stack`. Returns the pid, or -1 with `errno`.
///
/// Why a few lines of assembly: `clone3` has no libc wrapper, and a child
/// that shares our memory must not return into a Rust frame (it would run
/// on the parent's stack, which the compiler assumes is its own). The
/// trampoline makes the system call and, in the child only, calls
/// `child_main` on the new stack and exits; the parent sees an ordinary
/// system call.
#[cfg(target_arch = "x86_64")]
fn clone3_into_cgroup(
    context: &ChildContext<'_>,
    stack: &ChildStack,
    cgroup_dir: BorrowedFd<'_>,
    pidfd: &mut c_int,
) -> c_int {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64 | CLONE_INTO_CGROUP,
        pidfd: ptr::from_mut(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: stack.len as u64,
        cgroup: cgroup_dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let entry: extern "C" fn(*mut c_void) -> c_int = child_main;
    let argument = ptr::from_ref(context).cast_mut().cast::<c_void>();
    let result: i64;
    // SAFETY: the system call's arguments are `args` (alive in this frame,
    // of the size passed) and the descriptors it names. The child (rax 0)
    // starts with the kernel's stack pointer `stack.base + stack.len`, the
    // top of our own mapping (page-aligned, so 16-byte aligned at the
    // `call` as the C ABI wants), clears the frame pointer and calls
    // `child_main(context)`, which never returns (it execs or `_exit`s;
    // the `exit` after it is a backstop); it never executes an
    // instruction of this function after the system call, so nothing of
    // this frame or this stack is used by two processes. Everything else of
    // `clone_vfork`'s SAFETY holds the same way: CLONE_VFORK suspends this
    // thread until the child has exec'd or exited, so `context` and `stack`
    // outlive the child's use, and all signals are blocked. In the parent
    // the system call clobbers only rax, rcx and r11, as declared; r12 and
    // r13 are inputs it leaves unchanged. Like glibc's `clone`, the new
    // process keeps this thread's TLS, which the child's steps (system
    // calls and async-signal-safe libc wrappers) do not write.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") ptr::from_ref(&args),
            in("rsi") size_of::<CloneArgs>(),
            in("r12") argument,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if result < 0 {
        let errno = i32::try_from(-result).unwrap_or(libc::EINVAL);
        // SAFETY: glibc's errno location of this thread.
        unsafe { *libc::__errno_location() = errno };
        return -1;
    }
    c_int::try_from(result).unwrap_or(-1)
}

/// Elsewhere: no trampoline; the caller uses `clone_vfork`.
#[cfg(not(target_arch = "x86_64"))]
fn clone3_into_cgroup(
    _context: &ChildContext<'_>,
    _stack: &ChildStack,
    _cgroup_dir: BorrowedFd<'_>,
    _pidfd: &mut c_int,
) -> c_int {
    // SAFETY: glibc's errno location of this thread.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

fn reap(pid: Pid) {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Err(Errno::INTR) => {}
            _ => return,
        }
    }
}

/// The child's entry point, on its own stack.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildContext` of `spawn`'s frame, alive and
    // unmodified while this child runs (the parent thread is suspended by
    // CLONE_VFORK until we exec or exit).
    let context = unsafe { &*arg.cast_const().cast::<ChildContext<'_>>() };
    let Err((step, errno)) = run_child(context);
    context.report.errno.store(errno, Ordering::Release);
    context.report.step.store(step as i32, Ordering::Release);
    // SAFETY: `_exit` ends this process without running any of the
    // parent's atexit handlers or flushing its stdio buffers.
    unsafe { libc::_exit(127) }
}

/// The child's steps, in order; returns only on failure.
fn run_child(context: &ChildContext<'_>) -> Result<std::convert::Infallible, (Step, i32)> {
    reset_signals(context.signal_max, &context.parent_mask)
        .map_err(|errno| (Step::SignalMask, errno))?;
    let [stdin, stdout, stderr] = context.stdio;
    rustix::stdio::dup2_stdin(stdin)
        .and_then(|()| rustix::stdio::dup2_stdout(stdout))
        .and_then(|()| rustix::stdio::dup2_stderr(stderr))
        .map_err(|errno| (Step::Stdio, errno.raw_os_error()))?;
    // Everything after this, and the whole program after exec, runs inside
    // the worker's cgroup.
    if let Some(procs) = context.cgroup_procs {
        cgroup::enter_in_child(procs).map_err(|error| (Step::Cgroup, os_errno(&error)))?;
    }
    child_setup::enter_new_session_locked_down()
        .map_err(|error| (Step::Session, os_errno(&error)))?;
    context
        .limits
        .apply_in_child()
        .map_err(|error| (Step::Limits, os_errno(&error)))?;
    if let Some(cwd) = &context.plan.cwd {
        rustix::process::chdir(cwd.as_c_str())
            .map_err(|errno| (Step::Chdir, errno.raw_os_error()))?;
    }
    Err((Step::Exec, exec(context.plan)))
}

fn os_errno(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

/// `execvp`'s search over the prepared candidates: returns the errno of the
/// last attempt, or `EACCES` if any candidate was not executable.
fn exec(plan: &ExecPlan) -> i32 {
    let mut saw_eacces = false;
    let mut last = libc::ENOENT;
    for path in &plan.candidates {
        // SAFETY: every pointer is into `plan`, built before the clone and
        // alive until the parent resumes; both arrays are null-terminated.
        unsafe {
            libc::execve(
                path.as_ptr(),
                plan.argv_ptrs.as_ptr(),
                plan.envp_ptrs.as_ptr(),
            );
        }
        last = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        match last {
            libc::EACCES => saw_eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return last,
        }
    }
    if saw_eacces { libc::EACCES } else { last }
}

/// Every handled signal back to `SIG_DFL`, `SIGPIPE` to `SIG_DFL`, then the
/// parent's signal mask: the state std's `Command` gives a `fork`ed child
/// (DESIGN §17.2), reached without ever running a parent handler in the child
/// (everything stays blocked until the handlers are gone).
fn reset_signals(signal_max: c_int, mask: &libc::sigset_t) -> Result<(), i32> {
    for signal in 1..=signal_max {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction with a zeroed out-parameter of the right type;
        // glibc's wrapper is async-signal-safe and allocates nothing. It
        // refuses glibc's internal signals (EINVAL), which no one sends to
        // this new process.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut current) != 0 {
                continue;
            }
            let keep = current.sa_sigaction == libc::SIG_DFL
                || (current.sa_sigaction == libc::SIG_IGN && signal != libc::SIGPIPE);
            if keep {
                continue;
            }
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, ptr::null_mut());
        }
    }
    // SAFETY: `mask` is a sigset_t pthread_sigmask filled in the parent;
    // pthread_sigmask is async-signal-safe.
    let done = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, ptr::null_mut()) };
    if done == 0 { Ok(()) } else { Err(done) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::fs::File;

    #[test]
    fn a_bare_program_is_searched_like_execvp() {
        let names = |c: Vec<CString>| -> Vec<String> {
            c.into_iter().map(|s| s.into_string().unwrap()).collect()
        };
        assert_eq!(
            names(search_candidates(b"sh", None).unwrap()),
            ["/bin/sh", "/usr/bin/sh"]
        );
        assert_eq!(
            names(search_candidates(b"w", Some(b"/a::/b")).unwrap()),
            ["/a/w", "w", "/b/w"]
        );
        assert_eq!(
            names(search_candidates(b"./w", Some(b"/a")).unwrap()),
            ["./w"]
        );
        assert_eq!(
            search_candidates(b"", None).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
    }

    #[test]
    fn the_plan_keeps_only_declared_environment_entries_last_one_winning() {
        let command = WorkerCommand::new("/bin/true")
            .arg("x")
            .env("B", "1")
            .env("A", "2")
            .env("B", "3");
        let plan = ExecPlan::new(&command).unwrap();
        let envp: Vec<&CStr> = plan.envp.iter().map(CString::as_c_str).collect();
        assert_eq!(envp, [c"A=2", c"B=3"]);
        assert_eq!(plan.argv.len(), 2);
        assert_eq!(plan.argv_ptrs.len(), 3);
        assert!(plan.argv_ptrs[2].is_null());
        assert!(plan.envp_ptrs[2].is_null());
    }

    #[test]
    fn a_nul_byte_is_invalid_input() {
        let command = WorkerCommand::new("/bin/true").arg("a\0b");
        let error = ExecPlan::new(&command).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    /// Start `/bin/sh -c script` through [`spawn`] in `cgroup`; its stderr
    /// and how it entered.
    fn run_in(cgroup: &ChildCgroup, script: &str) -> (String, Entered) {
        use std::io::Read;
        let command = WorkerCommand::new("/bin/sh").arg("-c").arg(script);
        let plan = ExecPlan::new(&command).unwrap();
        let (stdin, _input) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let (output, stderr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let stdout = File::open("/dev/null").unwrap();
        let stdio = ChildStdio {
            stdin: ChildStdio::above_stdio(stdin).unwrap(),
            stdout: ChildStdio::above_stdio(stdout.into()).unwrap(),
            stderr: ChildStdio::above_stdio(stderr).unwrap(),
        };
        let limits = WorkerLimits::unlimited();
        let started = spawn(&plan, &stdio, Some(cgroup), &limits)
            .unwrap()
            .unwrap();
        drop(stdio);
        let mut text = String::new();
        File::from(output).read_to_string(&mut text).unwrap();
        reap(started.pid);
        (text, started.entered)
    }

    /// DESIGN §17.2: a worker runs inside its cgroup from its first
    /// instruction after the clone, whichever way it got there.
    #[test]
    fn a_worker_starts_inside_its_cgroup_by_clone3_or_by_the_procs_write() {
        use crate::cgroup::{CgroupLimits, ChildKind, Containment, resolve};
        let Ok(Some(hierarchy)) = resolve(Containment::Auto) else {
            crate::test_environment::skip(
                "cgroup",
                "a_worker_starts_inside_its_cgroup_by_clone3_or_by_the_procs_write",
                "no writable cgroup v2 hierarchy here",
            );
            return;
        };
        let cgroup =
            ChildCgroup::create(hierarchy, ChildKind::Worker, CgroupLimits::default()).unwrap();
        let name = cgroup
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let (text, entered) = run_in(&cgroup, "cat /proc/self/cgroup >&2");
        assert!(text.trim_end().ends_with(&format!("/{name}")), "{text}");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(entered, Entered::AtClone);
        }
        // A directory that is no cgroup: `clone3` refuses it, and the
        // child still enters through `cgroup.procs`.
        let cgroup = cgroup.with_clone_dir(File::open("/").unwrap());
        let (text, entered) = run_in(&cgroup, "cat /proc/self/cgroup >&2");
        assert!(text.trim_end().ends_with(&format!("/{name}")), "{text}");
        assert_eq!(entered, Entered::BeforeExec);
    }

    #[test]
    fn steps_round_trip_through_the_report_slot() {
        assert_eq!(Step::from_raw(Step::Chdir as i32), Step::Chdir);
        assert_eq!(Step::from_raw(0), Step::None);
        assert_eq!(Step::from_raw(99), Step::None);
    }
}
