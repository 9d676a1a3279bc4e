//! The exec guard (DESIGN §16.6 "Exactly one program"): a seccomp filter,
//! installed in the forked child immediately before its `execve`, that
//! hands every `execve` and `execveat` of the command's whole tree to the
//! parent as a user notification. The parent lets exactly one through —
//! the child's own exec of the granted program (which starts the program's
//! interpreter in the same system call) — and answers every later one with
//! `EPERM`, so nothing the program does can start a second program: not an
//! option that runs a helper (`gcc -wrapper`, `make SHELL=…`, `git
//! --exec-path`), not the dynamic loader run directly (`ld.so PROGRAM`,
//! whose file the Landlock execute ruleset must allow), not a copy of a
//! program in a `memfd` (`execveat(fd, "", …, AT_EMPTY_PATH)`, which
//! Landlock does not see).
//!
//! Why a user notification and not a plain filter: a filter decides per
//! system call from its number and arguments only, and the exec that starts
//! the program and the execs after it look alike (a path pointer, two array
//! pointers). Only a count tells them apart, and a filter keeps no state;
//! the parent does. The count is sound: when the filter is installed the
//! child is the only task that carries it, it makes no other `execve`, and
//! the parent receives the listener before it lets anything through, so
//! the first notification is the child's own exec. Once the parent closes
//! the listener (the command has ended), any task still carrying the filter
//! gets `ENOSYS` from the kernel for each exec: still refused.
//!
//! Why hand-written: `seccompiler` (what the reference worker's allowlist is
//! compiled with) has no `SECCOMP_RET_USER_NOTIF` action and cannot
//! install a filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, and rustix has
//! no seccomp API; the program is fifteen instructions, tested below by an
//! interpreter of the same instructions, and the notification protocol is
//! three `ioctl`s (`libc`'s structures and request numbers).
//!
//! Architectures: x86-64 (x32 and i386 execs are refused outright) and
//! aarch64 (32-bit ARM execs refused). Elsewhere there is no guard, and
//! [`exec_guard_support`] says so.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// What the filter answers for one system call (also what the tests'
/// interpreter reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Allow,
    /// `SECCOMP_RET_USER_NOTIF`: the parent decides.
    Notify,
    /// `SECCOMP_RET_ERRNO | EPERM`.
    Deny,
    /// `SECCOMP_RET_KILL_PROCESS`: an architecture the program does not
    /// know (none exists on the supported ones).
    Kill,
}

impl Verdict {
    const fn ret(self) -> u32 {
        match self {
            Self::Allow => libc::SECCOMP_RET_ALLOW,
            Self::Notify => libc::SECCOMP_RET_USER_NOTIF,
            // EPERM is 1; the errno travels in the action's data bits.
            Self::Deny => libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            Self::Kill => libc::SECCOMP_RET_KILL_PROCESS,
        }
    }
}

/// The system-call numbers the program checks on one platform.
struct Platform {
    /// `AUDIT_ARCH_*` of this build's system calls.
    native_arch: u32,
    /// `execve` and `execveat`, native: notified.
    native_execs: [u32; 2],
    /// Native-arch numbers refused outright (x32's `execve`/`execveat`).
    native_denied: &'static [u32],
    /// The 32-bit compatibility architecture, whose execs are refused.
    compat_arch: u32,
    compat_execs: [u32; 2],
}

/// `__X32_SYSCALL_BIT`: x32 system calls carry the x86-64 audit arch and
/// this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const PLATFORM: Option<Platform> = Some(Platform {
    native_arch: 0xC000_003E, // AUDIT_ARCH_X86_64
    native_execs: [59, 322],  // execve, execveat
    native_denied: &[X32_SYSCALL_BIT | 520, X32_SYSCALL_BIT | 545],
    compat_arch: 0x4000_0003, // AUDIT_ARCH_I386
    compat_execs: [11, 358],
});

#[cfg(target_arch = "aarch64")]
const PLATFORM: Option<Platform> = Some(Platform {
    native_arch: 0xC000_00B7, // AUDIT_ARCH_AARCH64
    native_execs: [221, 281], // execve, execveat
    native_denied: &[],
    compat_arch: 0x4000_0028, // AUDIT_ARCH_ARM
    compat_execs: [11, 387],
});

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const PLATFORM: Option<Platform> = None;

/// Offsets into `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

const LD_ABS_W: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// One instruction with a symbolic jump target (resolved by [`assemble`]).
enum Op {
    Load(u32),
    /// `if A == k` goto `on_true`, else fall through.
    JumpIfEqual(u32, Target),
    /// `if A == k` fall through, else goto `on_false`.
    JumpUnlessEqual(u32, Target),
    Return(Verdict),
    Label(Target),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Compat,
    Notify,
    Deny,
    Kill,
}

/// The filter for `platform`:
///
/// ```text
///   A = arch;  if A != native goto compat
///   A = nr;    execve, execveat → NOTIFY;  x32 execs → DENY;  ALLOW
/// compat:      if A != compat goto kill
///   A = nr;    execve, execveat → DENY;  ALLOW
/// notify: NOTIFY   deny: ERRNO(EPERM)   kill: KILL_PROCESS
/// ```
fn program_for(platform: &Platform) -> Vec<libc::sock_filter> {
    let mut ops = vec![
        Op::Load(DATA_ARCH),
        Op::JumpUnlessEqual(platform.native_arch, Target::Compat),
        Op::Load(DATA_NR),
    ];
    for nr in platform.native_execs {
        ops.push(Op::JumpIfEqual(nr, Target::Notify));
    }
    for &nr in platform.native_denied {
        ops.push(Op::JumpIfEqual(nr, Target::Deny));
    }
    ops.push(Op::Return(Verdict::Allow));
    ops.push(Op::Label(Target::Compat));
    ops.push(Op::JumpUnlessEqual(platform.compat_arch, Target::Kill));
    ops.push(Op::Load(DATA_NR));
    for nr in platform.compat_execs {
        ops.push(Op::JumpIfEqual(nr, Target::Deny));
    }
    ops.push(Op::Return(Verdict::Allow));
    ops.push(Op::Label(Target::Notify));
    ops.push(Op::Return(Verdict::Notify));
    ops.push(Op::Label(Target::Deny));
    ops.push(Op::Return(Verdict::Deny));
    ops.push(Op::Label(Target::Kill));
    ops.push(Op::Return(Verdict::Kill));
    assemble(&ops)
}

/// Resolve labels into the forward jump offsets of classic BPF.
fn assemble(ops: &[Op]) -> Vec<libc::sock_filter> {
    let mut positions = Vec::new();
    let mut index = 0_usize;
    for op in ops {
        match op {
            Op::Label(target) => positions.push((*target, index)),
            _ => index += 1,
        }
    }
    let at = |target: Target| {
        positions
            .iter()
            .find(|(label, _)| *label == target)
            .map_or(0, |(_, position)| *position)
    };
    let mut out = Vec::with_capacity(index);
    for op in ops {
        let here = out.len();
        // Offsets count from the next instruction; every target lies ahead
        // and the program is far shorter than 255 instructions.
        let offset = |target: Target| u8::try_from(at(target) - here - 1).unwrap_or(u8::MAX);
        let instruction = match op {
            Op::Label(_) => continue,
            Op::Load(k) => filter(LD_ABS_W, 0, 0, *k),
            Op::JumpIfEqual(k, target) => filter(JEQ_K, offset(*target), 0, *k),
            Op::JumpUnlessEqual(k, target) => filter(JEQ_K, 0, offset(*target), *k),
            Op::Return(verdict) => filter(RET_K, 0, 0, verdict.ret()),
        };
        out.push(instruction);
    }
    out
}

const fn filter(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The compiled filter of this platform, built once per process.
pub(crate) struct GuardProgram {
    instructions: Vec<libc::sock_filter>,
}

// SAFETY: plain data (`sock_filter` is four integers); it is only read.
unsafe impl Sync for GuardProgram {}
// SAFETY: as above.
unsafe impl Send for GuardProgram {}

impl GuardProgram {
    /// This platform's program, or `None` where there is no guard.
    pub(crate) fn get() -> Option<&'static Self> {
        static PROGRAM: OnceLock<Option<GuardProgram>> = OnceLock::new();
        PROGRAM
            .get_or_init(|| {
                PLATFORM.as_ref().map(|platform| Self {
                    instructions: program_for(platform),
                })
            })
            .as_ref()
    }

    /// Install the filter on the calling thread and return the listener.
    ///
    /// Runs in the forked child, after `no_new_privs` (which lets an
    /// unprivileged process install a filter): one `seccomp(2)` call on a
    /// `sock_fprog` built on the stack over data prepared before the fork;
    /// no allocation. The listener is close-on-exec (the kernel makes it
    /// so), so the program never holds it.
    pub(crate) fn install_in_child(&self) -> io::Result<RawFd> {
        let program = libc::sock_fprog {
            len: u16::try_from(self.instructions.len()).unwrap_or(u16::MAX),
            filter: self.instructions.as_ptr().cast_mut(),
        };
        // SAFETY: `program` points at `self.instructions`, alive and
        // unchanged for the call; SECCOMP_SET_MODE_FILTER only reads it.
        // The filter applies to this thread (the only one of the child).
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &raw const program,
            )
        };
        if listener < 0 {
            return Err(io::Error::last_os_error());
        }
        RawFd::try_from(listener).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// How many instructions (reports).
    pub(crate) fn len(&self) -> usize {
        self.instructions.len()
    }
}

/// Whether host commands granted by name run under the exec guard here,
/// and if not, why. Probed once per process.
pub fn exec_guard_support() -> &'static Result<(), String> {
    static SUPPORT: OnceLock<Result<(), String>> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> Result<(), String> {
    if GuardProgram::get().is_none() {
        return Err(format!(
            "no exec guard for the {} architecture",
            std::env::consts::ARCH
        ));
    }
    let action: u32 = libc::SECCOMP_RET_USER_NOTIF;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from `action`, which
    // lives for the call; nothing is installed.
    let available = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0_u32,
            &raw const action,
        )
    };
    if available != 0 {
        let error = io::Error::last_os_error();
        return Err(format!(
            "seccomp user notification is unavailable ({error}; Linux 5.5 or later with CONFIG_SECCOMP_FILTER)"
        ));
    }
    Ok(())
}

/// One line for reports: what the guard does here.
pub(crate) fn exec_guard_summary() -> String {
    match exec_guard_support() {
        Ok(()) => format!(
            "seccomp user notification ({} BPF instructions): a command granted by name executes exactly one program",
            GuardProgram::get().map_or(0, GuardProgram::len)
        ),
        Err(why) => format!("unavailable ({why})"),
    }
}

/// What [`ExecGuard::answer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The leader's own exec of the granted program was let through.
    Started,
    /// A later exec was refused with `EPERM`.
    Refused,
    /// The notification vanished (its task was killed) before it could
    /// be answered.
    Vanished,
}

/// The parent's side of one command's guard: the listener, and whether the
/// one exec has been used.
#[derive(Debug)]
pub(crate) struct ExecGuard {
    listener: OwnedFd,
    started: bool,
    refused: u32,
}

impl ExecGuard {
    /// The guard of one command, from the listener its program's process
    /// sent before its exec.
    pub(crate) fn new(listener: OwnedFd) -> Self {
        Self {
            listener,
            started: false,
            refused: 0,
        }
    }

    /// Readable while a notification waits; `POLLHUP` once no task carries
    /// the filter any more.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Whether the leader's exec was let through.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// How many execs were refused.
    pub(crate) fn refused(&self) -> u32 {
        self.refused
    }

    /// Receive one pending notification and answer it: the first exec (the
    /// program's own) continues, every other exec fails with `EPERM`. Call
    /// only when [`Self::fd`] polled readable (a receive without a pending
    /// notification would wait for one).
    pub(crate) fn answer(&mut self) -> io::Result<Answer> {
        // SAFETY: an all-zero `seccomp_notif` is valid (integers only) and
        // is what SECCOMP_IOCTL_NOTIF_RECV requires as input.
        let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one `seccomp_notif` into the buffer,
        // which is of that type and lives for the call.
        let received = unsafe {
            libc::ioctl(
                fd_raw(&self.listener),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &raw mut notification,
            )
        };
        if received != 0 {
            let error = io::Error::last_os_error();
            // ENOENT: the task was killed between the wake-up and the
            // receive; nothing is left to answer.
            return match error.raw_os_error() {
                Some(libc::ENOENT) => Ok(Answer::Vanished),
                _ => Err(error),
            };
        }
        // The first notification is the program's own exec: when the
        // listener reached this process only the program's process carried
        // the filter, and it made no other exec (module docs).
        let first = !self.started;
        let response = libc::seccomp_notif_resp {
            id: notification.id,
            val: 0,
            error: if first { 0 } else { -libc::EPERM },
            flags: if first {
                libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
            } else {
                0
            },
        };
        // SAFETY: the ioctl reads one `seccomp_notif_resp`, which lives
        // for the call.
        let sent = unsafe {
            libc::ioctl(
                fd_raw(&self.listener),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &raw const response,
            )
        };
        if sent != 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENOENT) => Ok(Answer::Vanished),
                _ => Err(error),
            };
        }
        if first {
            self.started = true;
            Ok(Answer::Started)
        } else {
            self.refused = self.refused.saturating_add(1);
            Ok(Answer::Refused)
        }
    }
}

fn fd_raw(fd: &OwnedFd) -> RawFd {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Run the classic-BPF subset the program uses over one
    /// `(arch, nr)` and map the returned action back to a verdict.
    fn run(program: &[libc::sock_filter], arch: u32, nr: u32) -> Verdict {
        let mut accumulator = 0_u32;
        let mut pc = 0_usize;
        loop {
            let instruction = program[pc];
            pc += 1;
            match instruction.code {
                LD_ABS_W => {
                    accumulator = match instruction.k {
                        DATA_NR => nr,
                        DATA_ARCH => arch,
                        other => panic!("load of offset {other}"),
                    }
                }
                JEQ_K => {
                    pc += usize::from(if accumulator == instruction.k {
                        instruction.jt
                    } else {
                        instruction.jf
                    });
                }
                RET_K => {
                    return [
                        Verdict::Allow,
                        Verdict::Notify,
                        Verdict::Deny,
                        Verdict::Kill,
                    ]
                    .into_iter()
                    .find(|verdict| verdict.ret() == instruction.k)
                    .unwrap();
                }
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn native_execs_are_notified_and_everything_else_is_allowed() {
        let Some(platform) = PLATFORM.as_ref() else {
            return;
        };
        let program = program_for(platform);
        for nr in platform.native_execs {
            assert_eq!(run(&program, platform.native_arch, nr), Verdict::Notify);
        }
        for nr in [0, 1, 2, 56, 57, 60, 231, 435, 1000] {
            if platform.native_execs.contains(&nr) {
                continue;
            }
            assert_eq!(run(&program, platform.native_arch, nr), Verdict::Allow);
        }
        for &nr in platform.native_denied {
            assert_eq!(run(&program, platform.native_arch, nr), Verdict::Deny);
        }
    }

    #[test]
    fn compat_execs_are_refused_and_unknown_architectures_killed() {
        let Some(platform) = PLATFORM.as_ref() else {
            return;
        };
        let program = program_for(platform);
        for nr in platform.compat_execs {
            assert_eq!(run(&program, platform.compat_arch, nr), Verdict::Deny);
        }
        assert_eq!(run(&program, platform.compat_arch, 3), Verdict::Allow);
        assert_eq!(run(&program, 0x1234, 59), Verdict::Kill);
        assert!(program.len() < 32, "{}", program.len());
    }

    #[test]
    fn the_probe_answers_on_this_kernel() {
        match exec_guard_support() {
            Ok(()) => assert!(exec_guard_summary().contains("exactly one program")),
            Err(why) => assert!(exec_guard_summary().contains(why.as_str())),
        }
    }
}
