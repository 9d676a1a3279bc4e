//! Starting one host command (DESIGN §16.6): a `clone` child — a copy of
//! the parent, as `fork` makes one — that contains itself and `execve`s the
//! granted program; and the parent's side of the child's report channel,
//! on which the exec guard's listener arrives and a failed step is
//! reported (the capture loop reads it, `exec`).
//!
//! Where the kernel allows it the child is the first process (init) of a
//! new PID namespace, and stays this crate's code: a small init that starts
//! the program as the namespace's second process (a `CLONE_VM` child on a
//! stack of its own, which makes no copy of the memory), reaps whatever is
//! orphaned to it, and when the program has exited sends its wait status to
//! the parent and exits — which makes the kernel kill everything left in
//! the namespace. The program is not init itself because init ignores the
//! signals it has no handler for (`kill -TERM $$` in a shell, `abort()`
//! would change meaning); the init has every descriptor closed but its
//! status pipe and no capability while it waits, and nothing of the command
//! can signal or trace it.
//!
//! Why our own `clone` and not `std::process::Command`: the command must
//! start in a new PID namespace, so that its end (or its init's `SIGKILL`)
//! makes the kernel kill every process of the namespace however it forked
//! or called `setsid` (DESIGN §16.7); `unshare(CLONE_NEWPID)` in a
//! `pre_exec` hook moves only the caller's *children* into the namespace.
//! And the exec guard (module `exec_guard`) needs the parent to answer the
//! child's exec while the spawn is under way, which `Command::spawn`
//! (blocked until the exec is done) cannot.
//!
//! The child runs on a stack of its own in its copy of the parent's memory;
//! everything it reads was built before the clone ([`ChildPlan`], the
//! `ExecImage`, the descriptors), it makes system calls only (no allocation,
//! no locks: the parent is multithreaded), and a step that fails sends
//! `(step, errno)` over the report socket and ends its process with
//! `_exit(127)`. The steps, in order — the init's (or, without a PID
//! namespace, the one child's): every signal disposition to its default and
//! an empty mask; in a user namespace, its id maps and the process limit
//! (`RLIMIT_NPROC`); join the command's cgroups; a process group of its own
//! (a new session without a namespace), `no_new_privs`, every inherited
//! descriptor close-on-exec (`child_setup`); `PR_SET_PDEATHSIG` = `SIGKILL`
//! (the spawning thread waits for the command, so its exit means the parent
//! is gone). Then the program's: a new session (no controlling terminal);
//! standard input `/dev/null`, output and error the capture pipes; `chdir`;
//! each Landlock layer; every capability dropped (bounding, ambient,
//! effective, permitted, inheritable); the exec guard's filter, whose
//! listener goes to the parent over the report socket; `execve`.

use std::ffi::{CStr, c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::OnceLock;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Pid, WaitOptions};

use super::exec_guard::GuardProgram;
use super::exec_image::ExecImage;
use crate::child_process::child_setup::{self, ChildStack, SignalsBlocked, above_stdio};

/// Which namespaces the command's first process is created in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Namespace {
    /// None: process-group and cgroup containment only.
    None,
    /// A new PID namespace (the parent holds `CAP_SYS_ADMIN`).
    Pid,
    /// A new user namespace, mapping only the parent's own user and group
    /// to themselves, and in it a new PID namespace: what an unprivileged
    /// parent may create where the kernel allows unprivileged user
    /// namespaces.
    UserAndPid,
}

impl Namespace {
    fn flags(self) -> c_int {
        match self {
            Self::None => 0,
            Self::Pid => libc::CLONE_NEWPID,
            Self::UserAndPid => libc::CLONE_NEWUSER | libc::CLONE_NEWPID,
        }
    }
}

/// Whether host commands start in a PID namespace of their own here, and
/// if not, why. Probed once per process by starting one such child.
pub fn pid_namespace_support() -> &'static Result<(), String> {
    static SUPPORT: OnceLock<Result<(), String>> = OnceLock::new();
    SUPPORT.get_or_init(|| match namespace_probed() {
        Namespace::None => Err(NAMESPACE_REFUSED.get().cloned().unwrap_or_default()),
        _ => Ok(()),
    })
}

/// Why neither namespace could be created (set by the probe).
static NAMESPACE_REFUSED: OnceLock<String> = OnceLock::new();

/// The namespace host commands are started in.
pub(crate) fn namespace_in_effect() -> Namespace {
    namespace_probed()
}

fn namespace_probed() -> Namespace {
    static PROBED: OnceLock<Namespace> = OnceLock::new();
    *PROBED.get_or_init(|| {
        let pid = probe_namespace(Namespace::Pid);
        if pid.is_ok() {
            return Namespace::Pid;
        }
        let user = probe_namespace(Namespace::UserAndPid);
        if user.is_ok() {
            return Namespace::UserAndPid;
        }
        let why = format!(
            "a new PID namespace is refused ({}; it needs CAP_SYS_ADMIN), and so is one in a user namespace of its own ({})",
            pid.err().unwrap_or_default(),
            user.err().unwrap_or_default()
        );
        let _ = NAMESPACE_REFUSED.set(why);
        Namespace::None
    })
}

extern "C" fn exit_at_once(_: *mut c_void) -> c_int {
    // SAFETY: `_exit` ends the probe child without touching anything of
    // the copied parent.
    unsafe { libc::_exit(0) }
}

fn probe_namespace(namespace: Namespace) -> Result<(), String> {
    let stack = ChildStack::map().map_err(|error| format!("no stack for the probe: {error}"))?;
    let blocked = SignalsBlocked::all().map_err(|error| format!("signal mask: {error}"))?;
    // SAFETY: the child runs `exit_at_once` on `stack` (its own copy: no
    // CLONE_VM) and exits at once; all signals are blocked around the
    // clone, so no handler runs in it.
    let pid = unsafe {
        libc::clone(
            exit_at_once,
            stack.top(),
            namespace.flags() | libc::SIGCHLD,
            ptr::null_mut(),
        )
    };
    let error = io::Error::last_os_error();
    drop(blocked);
    if pid < 0 {
        return Err(error.to_string());
    }
    if let Some(pid) = Pid::from_raw(pid) {
        reap(pid);
    }
    Ok(())
}

/// Whether host commands run in a user namespace of their own (an
/// unprivileged parent), where a process limit is `RLIMIT_NPROC` in it.
pub(crate) fn user_namespace_in_effect() -> bool {
    namespace_in_effect() == Namespace::UserAndPid
}

/// One line for reports.
pub(crate) fn pid_namespace_summary() -> String {
    match namespace_in_effect() {
        Namespace::Pid => "each host command runs in a PID namespace of its own under a small init: when the program ends, the kernel kills every process it started".to_owned(),
        Namespace::UserAndPid => "each host command runs in a PID namespace of its own, inside a user namespace that maps only this user (no CAP_SYS_ADMIN here), under a small init: when the program ends, the kernel kills every process it started".to_owned(),
        Namespace::None => format!(
            "unavailable ({}): process groups, the /proc sweep and adopted orphans (DESIGN §16.7)",
            NAMESPACE_REFUSED.get().map_or("", String::as_str)
        ),
    }
}

/// The user and group maps an unprivileged parent writes for its command's
/// user namespace (its own ids to themselves), prepared before the clone.
pub(super) struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl IdMaps {
    pub(super) fn of_this_process() -> Self {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Runs in the init, in its new user namespace: `deny` to `setgroups`,
    /// then both maps (`open` and `write`, no allocation).
    fn write_in_child(&self) -> io::Result<()> {
        let write = |path: &CStr, bytes: &[u8]| -> io::Result<()> {
            let file =
                rustix::fs::open(path, rustix::fs::OFlags::WRONLY, rustix::fs::Mode::empty())?;
            rustix::io::write(&file, bytes)?;
            Ok(())
        };
        write(c"/proc/self/setgroups", b"deny")?;
        write(c"/proc/self/uid_map", &self.uid_map)?;
        write(c"/proc/self/gid_map", &self.gid_map)
    }
}

/// Everything the child needs, built before the clone.
pub(super) struct ChildPlan<'a> {
    pub(super) image: &'a ExecImage,
    pub(super) cwd: &'a CStr,
    /// `cgroup.procs` descriptors to write `0` to, in order.
    pub(super) cgroup_procs: &'a [RawFd],
    /// Landlock rulesets to restrict the child with, one layer each.
    pub(super) landlock: &'a [RawFd],
    /// The exec guard's filter, for a command granted by name.
    pub(super) guard: Option<&'static GuardProgram>,
    pub(super) namespace: Namespace,
    /// The maps of a [`Namespace::UserAndPid`].
    pub(super) id_maps: Option<&'a IdMaps>,
    /// `RLIMIT_NPROC` of the command, where its process limit is counted
    /// in its user namespace (no `pids` controller, §16.7).
    pub(super) processes_max: Option<u64>,
    /// The highest capability number, when the parent may empty the
    /// bounding set (it holds `CAP_SETPCAP`).
    pub(super) bounding_last: Option<u32>,
}

/// Which step of the child failed (reported with its errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(super) enum Step {
    Signals = 1,
    Stdio,
    Cgroup,
    Session,
    ParentDeath,
    Chdir,
    Landlock,
    Capabilities,
    ExecGuard,
    SendListener,
    Exec,
    Init,
    UserNamespace,
    ProcessLimit,
}

impl Step {
    fn from_raw(raw: i32) -> Option<Self> {
        [
            Self::Signals,
            Self::Stdio,
            Self::Cgroup,
            Self::Session,
            Self::ParentDeath,
            Self::Chdir,
            Self::Landlock,
            Self::Capabilities,
            Self::ExecGuard,
            Self::SendListener,
            Self::Exec,
            Self::Init,
            Self::UserNamespace,
            Self::ProcessLimit,
        ]
        .into_iter()
        .find(|step| *step as i32 == raw)
    }

    /// What the step does, for an error's context.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::Signals => "resetting signal dispositions",
            Self::Stdio => "setting up standard input, output and error",
            Self::Cgroup => "joining the command's cgroup",
            Self::Session => "starting a new session with no_new_privs",
            Self::ParentDeath => "setting the parent-death signal",
            Self::Chdir => "changing to the working directory",
            Self::Landlock => "entering the command's Landlock domain",
            Self::Capabilities => "dropping every capability",
            Self::ExecGuard => "installing the exec guard",
            Self::SendListener => "handing the exec guard to the parent",
            Self::Exec => "executing the program",
            Self::Init => "starting the program in its PID namespace",
            Self::UserNamespace => "mapping this user in the command's user namespace",
            Self::ProcessLimit => "setting the command's process limit (RLIMIT_NPROC)",
        }
    }
}

/// A started child, before its exec is known to have happened.
pub(super) struct Launched {
    /// The first process: the program, or the init of its namespace.
    pub(super) pid: Pid,
    /// The parent's end of the report socket.
    pub(super) report: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
    /// In a PID namespace: where the init sends the program's wait status.
    pub(super) status: Option<OwnedFd>,
}

/// The program's wait status as its init sent it over `status` (PID
/// namespace only; `None` if the init was killed before it could send
/// one). Read only after the init has exited and been reaped, when the
/// pipe cannot block.
pub(super) fn program_status(status: &OwnedFd) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let mut bytes = [0_u8; 4];
    match rustix::io::read(status, &mut bytes) {
        Ok(4) => Some(std::process::ExitStatus::from_raw(i32::from_ne_bytes(
            bytes,
        ))),
        _ => None,
    }
}

/// What the child reads, in its copy of the parent's memory.
struct ChildContext<'a> {
    plan: &'a ChildPlan<'a>,
    stdio: [RawFd; 3],
    report: RawFd,
    /// The write end of the status pipe (PID namespace only).
    status: RawFd,
    /// The top of the program's stack, for the init's `CLONE_VM` child.
    program_stack: *mut c_void,
    signal_max: c_int,
}

/// Start the child of `plan` (see the module docs). The child is unreaped
/// and may still fail before its exec: its [`ReportChannel`] says.
pub(super) fn launch(plan: &ChildPlan<'_>) -> io::Result<Launched> {
    let stdin = above_stdio(rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)?;
    let (stdout, stdout_writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (stderr, stderr_writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stdout_writer = above_stdio(stdout_writer)?;
    let stderr_writer = above_stdio(stderr_writer)?;
    let (report, child_report) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let child_report = above_stdio(child_report)?;
    let in_namespace = plan.namespace != Namespace::None;
    let (status, status_writer) = if in_namespace {
        let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        (Some(reader), Some(above_stdio(writer)?))
    } else {
        (None, None)
    };
    let stack = ChildStack::map()?;
    let program_stack = if in_namespace {
        Some(ChildStack::map()?)
    } else {
        None
    };
    let context = ChildContext {
        plan,
        stdio: [
            stdin.as_raw_fd(),
            stdout_writer.as_raw_fd(),
            stderr_writer.as_raw_fd(),
        ],
        report: child_report.as_raw_fd(),
        status: status_writer.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        program_stack: program_stack
            .as_ref()
            .map_or(ptr::null_mut(), ChildStack::top),
        signal_max: libc::SIGRTMAX(),
    };
    let flags = libc::SIGCHLD | plan.namespace.flags();
    let blocked = SignalsBlocked::all()?;
    // SAFETY: without CLONE_VM the child runs `command_child_main` on its
    // own copy of `stack` and of `context` (and everything `context` points
    // to), which the parent built before the clone and keeps unchanged until
    // `clone` returns; the child follows the module's rules (system calls
    // only, no allocation, no locks, no unwinding: the entry is an
    // `extern "C" fn` that ends in `_exit`). All signals are blocked in this
    // thread, so the child starts with them blocked and no handler runs in
    // it before it resets the dispositions.
    let pid = unsafe {
        libc::clone(
            command_child_main,
            stack.top(),
            flags,
            ptr::from_ref(&context).cast_mut().cast::<c_void>(),
        )
    };
    let clone_error = io::Error::last_os_error();
    drop(blocked);
    // The child has copies of both stacks; ours go.
    drop(stack);
    drop(program_stack);
    if pid < 0 {
        return Err(clone_error);
    }
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("clone returned pid 0"))?;
    Ok(Launched {
        pid,
        report,
        stdout,
        stderr,
        status,
    })
}

/// The parent's end of the report socket while the command runs (read
/// from the same wait that captures its output, so the parent never waits
/// for the exec on its own): the exec guard's listener arrives on it, a
/// step that failed is reported on it, and its end of file means every
/// process that could report has exec'd or exited.
#[derive(Debug)]
pub(super) struct ReportChannel {
    fd: Option<OwnedFd>,
    failed: Option<(Step, i32)>,
}

/// What one read of the [`ReportChannel`] brought.
pub(super) enum Reported {
    /// The exec guard's listener.
    Listener(OwnedFd),
    /// Nothing the caller must act on (a failure is kept, see
    /// [`ReportChannel::failure`]; the end closes the channel).
    Nothing,
}

impl ReportChannel {
    pub(super) fn new(fd: OwnedFd) -> Self {
        Self {
            fd: Some(fd),
            failed: None,
        }
    }

    /// The socket, until its end of file was read.
    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(AsFd::as_fd)
    }

    /// The step that failed before the program's exec, with its error.
    pub(super) fn failure(&self) -> Option<(Step, io::Error)> {
        self.failed
            .map(|(step, errno)| (step, io::Error::from_raw_os_error(errno)))
    }

    /// Read one message (call when [`Self::fd`] polled readable).
    pub(super) fn read(&mut self) -> io::Result<Reported> {
        let Some(fd) = self.fd.as_ref() else {
            return Ok(Reported::Nothing);
        };
        match read_report(fd.as_fd())? {
            Report::Listener(listener) => return Ok(Reported::Listener(listener)),
            Report::Failed(step, errno) => {
                self.failed.get_or_insert((step, errno));
            }
            Report::End => self.fd = None,
            Report::Nothing => {}
        }
        Ok(Reported::Nothing)
    }
}

enum Report {
    Listener(OwnedFd),
    Failed(Step, i32),
    End,
    /// Nothing to read after all (interrupted, or a spurious wake-up).
    Nothing,
}

/// One message of the report socket.
fn read_report(report: BorrowedFd<'_>) -> io::Result<Report> {
    let mut bytes = [0_u8; 8];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = match rustix::net::recvmsg(
        report,
        &mut [io::IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    ) {
        Ok(received) => received,
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => return Ok(Report::Nothing),
        Err(error) => return Err(error.into()),
    };
    let mut listener = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                // Only the first descriptor is the listener; any other
                // closes on drop.
                if listener.is_none() {
                    listener = Some(fd);
                }
            }
        }
    }
    if let Some(listener) = listener {
        return Ok(Report::Listener(listener));
    }
    match received.bytes {
        0 => Ok(Report::End),
        8 => {
            let step = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let errno = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
            let step = Step::from_raw(step)
                .ok_or_else(|| io::Error::other("the child reported an unknown step"))?;
            Ok(Report::Failed(step, errno))
        }
        _ => Err(io::Error::other(
            "the child's report was neither a step and errno nor a listener",
        )),
    }
}

/// Reap `pid`, retrying on `EINTR`.
pub(super) fn reap(pid: Pid) {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => {}
            _ => return,
        }
    }
}

/// The child's entry point, on its own stack: the init of the command's
/// PID namespace, or (without one) the program's process itself.
extern "C" fn command_child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildContext` of `launch`'s frame, in this
    // child's copy of the parent's memory, unchanged since the clone.
    let context = unsafe { &*arg.cast_const().cast::<ChildContext<'_>>() };
    let failed = if context.plan.namespace != Namespace::None {
        run_init(context)
    } else {
        let Err(failed) = run_whole(context);
        failed
    };
    report_and_exit(context.report, failed)
}

/// Send `(step, errno)` on the report socket and `_exit(127)`.
fn report_and_exit(report: RawFd, (step, errno): (Step, i32)) -> ! {
    let mut message = [0_u8; 8];
    message[..4].copy_from_slice(&(step as i32).to_ne_bytes());
    message[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: the report descriptor is open in this process (close-on-exec,
    // and no exec happened).
    let report = unsafe { BorrowedFd::borrow_raw(report) };
    let _ = rustix::net::send(report, &message, SendFlags::NOSIGNAL);
    // SAFETY: `_exit` ends this process without running the parent's
    // atexit handlers or flushing its buffers.
    unsafe { libc::_exit(127) }
}

fn errno_of(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

/// Without a PID namespace: every step in this one process, then `execve`.
fn run_whole(context: &ChildContext<'_>) -> Result<std::convert::Infallible, (Step, i32)> {
    enter_command(context)?;
    run_program(context)
}

/// The steps that contain the whole command: signal dispositions, its
/// cgroups, a new session with `no_new_privs` and no inherited
/// descriptor, and death with the parent.
fn enter_command(context: &ChildContext<'_>) -> Result<(), (Step, i32)> {
    reset_signals(context.signal_max).map_err(|errno| (Step::Signals, errno))?;
    if let Some(maps) = context.plan.id_maps {
        maps.write_in_child()
            .map_err(|error| (Step::UserNamespace, errno_of(&error)))?;
    }
    if let Some(max) = context.plan.processes_max {
        rustix::process::setrlimit(
            rustix::process::Resource::Nproc,
            rustix::process::Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        )
        .map_err(|errno| (Step::ProcessLimit, errno.raw_os_error()))?;
    }
    for &procs in context.plan.cgroup_procs {
        crate::cgroup::enter_in_child(procs).map_err(|error| (Step::Cgroup, errno_of(&error)))?;
    }
    if context.plan.namespace == Namespace::None {
        child_setup::enter_new_session_locked_down()
    } else {
        // The init: a group of its own (out of a terminal's foreground
        // group), no session (the program starts that).
        child_setup::enter_new_group_locked_down()
    }
    .map_err(|error| (Step::Session, errno_of(&error)))?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|errno| (Step::ParentDeath, errno.raw_os_error()))?;
    Ok(())
}

/// The init of the command's PID namespace: contain the command, start the
/// program as a `CLONE_VM` child (on its own stack), close every descriptor
/// but the status pipe, drop every capability, then reap until the program
/// is gone and send its wait status. Returns only when a step
/// before the program started failed.
fn run_init(context: &ChildContext<'_>) -> (Step, i32) {
    if let Err(failed) = enter_command(context) {
        return failed;
    }
    // SAFETY: the program's child runs `program_main` on the second stack
    // (this process's copy of the mapping the parent made, which this
    // process never unmaps and outlives: it waits for the child) and only
    // reads `context`, which lives in this process's copy of the parent's
    // memory and which nothing writes. This process goes on at once (no
    // CLONE_VFORK, so that it does not wait to be woken when the program
    // execs: under load each wake-up of a new process costs a scheduler
    // slice) and, like the child, touches only its own stack and makes
    // system calls: nothing is written by both. (Both share the C library's
    // per-thread `errno`, which this process writes only if `close_range`
    // below fails, and reads never.) The child has a copy of the descriptor
    // table (no CLONE_FILES), so closing ours leaves its own intact. It ends
    // in `execve` or `_exit`.
    let program = unsafe {
        libc::clone(
            program_main,
            context.program_stack,
            libc::CLONE_VM | libc::SIGCHLD,
            ptr::from_ref(context).cast_mut().cast::<c_void>(),
        )
    };
    if program < 0 {
        return (Step::Init, errno_of(&io::Error::last_os_error()));
    }
    // The program's process has its own report socket, which closes when
    // it execs: the parent reads the socket to its end once this copy is
    // closed too. Nothing else of the parent's may stay open here: close
    // every descriptor but the status pipe.
    // SAFETY: close_range with integer arguments; the only descriptor this
    // process still uses is `context.status`.
    unsafe {
        let status = libc::c_uint::try_from(context.status).unwrap_or(0);
        libc::syscall(
            libc::SYS_close_range,
            0_u32,
            status.saturating_sub(1),
            0_u32,
        );
        libc::syscall(libc::SYS_close_range, status + 1, libc::c_uint::MAX, 0_u32);
    }
    // This process needs no privilege to wait.
    let _ = child_setup::drop_capabilities(context.plan.bounding_last);
    let program = Pid::from_raw(program);
    loop {
        // Any child: the program (which leads a group of its own) or an
        // orphan of it.
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if Some(pid) == program => {
                // SAFETY: the status pipe is open (kept above).
                let pipe = unsafe { BorrowedFd::borrow_raw(context.status) };
                let _ = rustix::io::write(pipe, &status.as_raw().to_ne_bytes());
                break;
            }
            // An orphan of the command, reaped; or interrupted.
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    // SAFETY: `_exit` ends the init; the kernel then kills every process
    // left in the namespace.
    unsafe { libc::_exit(0) }
}

/// The program's process in a PID namespace (the init's `CLONE_VM` child,
/// on the second stack).
extern "C" fn program_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the init's `ChildContext`, which lives until the
    // init exits (after this child) and which nothing writes.
    let context = unsafe { &*arg.cast_const().cast::<ChildContext<'_>>() };
    let Err(failed) = run_program(context);
    report_and_exit(context.report, failed)
}

/// The program's own steps, in order; returns only on failure.
fn run_program(context: &ChildContext<'_>) -> Result<std::convert::Infallible, (Step, i32)> {
    let plan = context.plan;
    if plan.namespace != Namespace::None {
        // The program leads a session and group of its own, as without a
        // namespace (it is not a group leader: its group is the init's).
        rustix::process::setsid().map_err(|errno| (Step::Session, errno.raw_os_error()))?;
    }
    let [stdin, stdout, stderr] = context.stdio.map(|fd| {
        // SAFETY: descriptors the parent opened before the clone and keeps
        // open until the clone returned; this child has its own copies.
        unsafe { BorrowedFd::borrow_raw(fd) }
    });
    rustix::stdio::dup2_stdin(stdin)
        .and_then(|()| rustix::stdio::dup2_stdout(stdout))
        .and_then(|()| rustix::stdio::dup2_stderr(stderr))
        .map_err(|errno| (Step::Stdio, errno.raw_os_error()))?;
    rustix::process::chdir(plan.cwd).map_err(|errno| (Step::Chdir, errno.raw_os_error()))?;
    for &ruleset in plan.landlock {
        super::exec_ruleset::restrict_in_child(ruleset)
            .map_err(|error| (Step::Landlock, errno_of(&error)))?;
    }
    child_setup::drop_capabilities(plan.bounding_last)
        .map_err(|error| (Step::Capabilities, errno_of(&error)))?;
    if let Some(guard) = plan.guard {
        let listener = guard
            .install_in_child()
            .map_err(|error| (Step::ExecGuard, errno_of(&error)))?;
        // SAFETY: the descriptor the kernel just returned; this child owns
        // it and closes it below, after sending a copy to the parent.
        let listener = unsafe { BorrowedFd::borrow_raw(listener) };
        send_listener(context.report, listener)
            .map_err(|errno| (Step::SendListener, errno.raw_os_error()))?;
        // The parent has its own copy now; the program must not hold one
        // (it is close-on-exec too).
        // SAFETY: closes the descriptor borrowed above, which nothing uses
        // after this.
        unsafe { libc::close(listener.as_raw_fd()) };
    }
    Err((Step::Exec, plan.image.exec()))
}

/// Send `listener` over the report socket (`SCM_RIGHTS`, one payload
/// byte). No allocation: the control buffer is on the stack.
fn send_listener(report: RawFd, listener: BorrowedFd<'_>) -> Result<(), rustix::io::Errno> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [listener];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    // SAFETY: the report descriptor is open in this child (see
    // `command_child_main`).
    let report = unsafe { BorrowedFd::borrow_raw(report) };
    rustix::net::sendmsg(
        report,
        &[io::IoSlice::new(b"G")],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Every signal disposition back to its default and an empty mask
/// (ignored signals survive `exec`, so they are reset too).
fn reset_signals(signal_max: c_int) -> Result<(), i32> {
    for signal in 1..=signal_max {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction with a zeroed `sigaction` (SIG_DFL, no flags,
        // empty mask); glibc's wrapper is async-signal-safe and allocates
        // nothing. It refuses glibc's internal signals (EINVAL), which no
        // one sends to this new process.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, &raw const default, ptr::null_mut());
        }
    }
    // SAFETY: a sigset_t filled by sigemptyset; pthread_sigmask is
    // async-signal-safe.
    let done = unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const empty, ptr::null_mut())
    };
    if done == 0 { Ok(()) } else { Err(done) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_the_report() {
        for raw in 1..=14 {
            let step = Step::from_raw(raw).unwrap();
            assert_eq!(step as i32, raw);
            assert!(!step.describe().is_empty());
        }
        assert_eq!(Step::from_raw(0), None);
        assert_eq!(Step::from_raw(15), None);
    }

    #[test]
    fn the_pid_namespace_probe_matches_the_summary() {
        match pid_namespace_support() {
            Ok(()) => assert!(pid_namespace_summary().contains("PID namespace of its own")),
            Err(why) => assert!(pid_namespace_summary().contains(why.as_str())),
        }
    }
}
