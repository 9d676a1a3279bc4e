//! The seccomp allowlist as data (DESIGN §18.3): every system call the
//! worker may make once it is locked down, each with its argument
//! conditions ([`Check`]) and the reason the serve loop needs it, and the
//! architecture and action constants the program is built from.
//! [`super::Filter`] compiles it; `quirl-worker --lockdown-report` prints
//! it.

/// [`FRAME_FD`](crate::lockdown::FRAME_FD) as the filter compares it.
const FRAME_FD: u32 = crate::lockdown::FRAME_FD.cast_unsigned();

/// `AUDIT_ARCH_*` of the architecture this worker was built for
/// (`EM_*` | `__AUDIT_ARCH_64BIT` | `__AUDIT_ARCH_LE`, linux/audit.h); the
/// value seccompiler's architecture check compares with the target
/// architecture it compiles for.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xC000_003E;
/// `AUDIT_ARCH_*` of the architecture this worker was built for.
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Name of [`AUDIT_ARCH`].
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_NAME: &str = "AUDIT_ARCH_X86_64";
/// Name of [`AUDIT_ARCH`].
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_NAME: &str = "AUDIT_ARCH_AARCH64";

/// x32 system calls run under `AUDIT_ARCH_X86_64` with this bit set in the
/// number (`__X32_SYSCALL_BIT`); no rule has it, so the default action kills
/// them (a unit test checks it).
#[cfg(target_arch = "x86_64")]
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `SECCOMP_RET_ALLOW`, the action of a matched rule.
pub const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
/// `SECCOMP_RET_KILL_PROCESS` (Linux 4.14; older kernels kill the thread,
/// which for this single-threaded worker is the same): the action for
/// everything else.
pub const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

// Argument values the conditions name (uapi headers through libc; the same
// on x86_64 and aarch64).
pub(super) const PROT_EXEC: u32 = libc::PROT_EXEC.cast_unsigned();
pub(super) const MAP_PRIVATE: u32 = libc::MAP_PRIVATE.cast_unsigned();
pub(super) const MAP_ANONYMOUS: u32 = libc::MAP_ANONYMOUS.cast_unsigned();
/// `MAP_TYPE`: the sharing type bits (private, shared, shared-validate,
/// droppable; linux/mman.h, not exported by libc).
pub(super) const MAP_TYPE: u32 = 0x0f;
pub(super) const MREMAP_MAYMOVE: u32 = libc::MREMAP_MAYMOVE.cast_unsigned();
pub(super) const MADV_DONTNEED: u32 = libc::MADV_DONTNEED.cast_unsigned();
pub(super) const MADV_FREE: u32 = libc::MADV_FREE.cast_unsigned();
pub(super) const FUTEX_WAIT_PRIVATE: u32 =
    (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG).cast_unsigned();
pub(super) const FUTEX_WAKE_PRIVATE: u32 =
    (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG).cast_unsigned();
pub(super) const FUTEX_WAIT_BITSET_PRIVATE: u32 =
    (libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG).cast_unsigned();
pub(super) const FUTEX_WAKE_BITSET_PRIVATE: u32 =
    (libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG).cast_unsigned();
pub(super) const FUTEX_CLOCK_REALTIME: u32 = libc::FUTEX_CLOCK_REALTIME.cast_unsigned();
pub(super) const SIGBUS: u32 = libc::SIGBUS.cast_unsigned();
pub(super) const SIGABRT: u32 = libc::SIGABRT.cast_unsigned();
pub(super) const SIGSEGV: u32 = libc::SIGSEGV.cast_unsigned();

/// A condition on one argument. Every condition also requires the upper 32
/// bits of the argument to be zero (all the arguments checked here are
/// `int`s or flag words that fit 32 bits).
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// `args[arg] & mask` is one of `values`.
    Masked {
        /// Argument index (0..6).
        arg: u8,
        /// Bits compared.
        mask: u32,
        /// Accepted values of the masked bits.
        values: &'static [u32],
    },
    /// `args[arg]` is this process's pid (filled in by
    /// [`Filter::build`](super::Filter::build)).
    OwnPid {
        /// Argument index (0..6).
        arg: u8,
    },
}

/// One allowed system call.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The system call's name.
    pub name: &'static str,
    /// Its number on this architecture.
    pub nr: libc::c_long,
    /// Conditions that must all hold (none: any arguments).
    pub checks: &'static [Check],
    /// The conditions, for people.
    pub condition: &'static str,
    /// Why the serve loop needs it.
    pub reason: &'static str,
}

const ANY: &[Check] = &[];

/// The allowlist. seccompiler orders the program by system call number (on
/// x86_64 `read` and `write`, the serve loop's hot calls, are 0 and 1).
pub const ALLOWLIST: &[Rule] = &[
    Rule {
        name: "read",
        nr: libc::SYS_read,
        checks: &[Check::Masked {
            arg: 0,
            mask: u32::MAX,
            values: &[0],
        }],
        condition: "fd == 0",
        reason: "parent frames (requests, host responses) arrive on stdin",
    },
    Rule {
        name: "write",
        nr: libc::SYS_write,
        checks: &[Check::Masked {
            arg: 0,
            mask: u32::MAX,
            values: &[FRAME_FD, 2],
        }],
        condition: "fd == 3 or fd == 2",
        reason: "worker frames (responses, host calls) leave on the stderr pipe, duplicated to fd 3; fd 2 (then /dev/null) is where Rust's runtime prints a stack-overflow or allocation-failure message before it aborts",
    },
    Rule {
        name: "mmap",
        nr: libc::SYS_mmap,
        checks: &[
            Check::Masked {
                arg: 2,
                mask: PROT_EXEC,
                values: &[0],
            },
            Check::Masked {
                arg: 3,
                mask: MAP_ANONYMOUS | MAP_TYPE,
                values: &[MAP_ANONYMOUS | MAP_PRIVATE],
            },
        ],
        condition: "prot without PROT_EXEC; flags MAP_PRIVATE | MAP_ANONYMOUS",
        reason: "malloc serves large blocks (Lua strings and tables, frame buffers) from anonymous mappings; nothing maps code or files after initialize",
    },
    Rule {
        name: "munmap",
        nr: libc::SYS_munmap,
        checks: ANY,
        condition: "any",
        reason: "free of a large block; the runtime's alternate signal stack at exit",
    },
    Rule {
        name: "mremap",
        nr: libc::SYS_mremap,
        checks: &[Check::Masked {
            arg: 3,
            mask: !MREMAP_MAYMOVE,
            values: &[0],
        }],
        condition: "flags ⊆ MREMAP_MAYMOVE",
        reason: "realloc of a large block (growing strings, tables and buffers)",
    },
    Rule {
        name: "brk",
        nr: libc::SYS_brk,
        checks: ANY,
        condition: "any",
        reason: "malloc grows and trims its main heap",
    },
    Rule {
        name: "madvise",
        nr: libc::SYS_madvise,
        checks: &[Check::Masked {
            arg: 2,
            mask: u32::MAX,
            values: &[MADV_DONTNEED, MADV_FREE],
        }],
        condition: "advice MADV_DONTNEED or MADV_FREE",
        reason: "malloc may return freed pages to the kernel (not seen on glibc's main arena; allowed so an allocator change cannot crash the worker)",
    },
    Rule {
        name: "futex",
        nr: libc::SYS_futex,
        checks: &[Check::Masked {
            arg: 1,
            mask: !FUTEX_CLOCK_REALTIME,
            values: &[
                FUTEX_WAIT_PRIVATE,
                FUTEX_WAKE_PRIVATE,
                FUTEX_WAIT_BITSET_PRIVATE,
                FUTEX_WAKE_BITSET_PRIVATE,
            ],
        }],
        condition: "op one of WAIT, WAKE, WAIT_BITSET, WAKE_BITSET, private (no requeue, no PI)",
        reason: "std and libc locks under contention (the worker is single-threaded, so never seen; allowed because a lock must never crash the worker)",
    },
    Rule {
        name: "clock_gettime",
        nr: libc::SYS_clock_gettime,
        checks: ANY,
        condition: "any",
        reason: "deadlines (Instant::now); normally answered by the vDSO without a system call, this is the fallback",
    },
    #[cfg(target_arch = "x86_64")]
    Rule {
        name: "time",
        nr: libc::SYS_time,
        checks: ANY,
        condition: "any",
        reason: "Lua's math.randomseed() without arguments reads time(); normally the vDSO, this is the fallback",
    },
    Rule {
        name: "rt_sigreturn",
        nr: libc::SYS_rt_sigreturn,
        checks: ANY,
        condition: "any",
        reason: "return from a signal handler (Rust's SIGSEGV/SIGBUS handler returns after resetting itself for a fault that is not a stack overflow)",
    },
    Rule {
        name: "rt_sigprocmask",
        nr: libc::SYS_rt_sigprocmask,
        checks: ANY,
        condition: "any",
        reason: "abort() blocks signals before raising SIGABRT",
    },
    Rule {
        name: "rt_sigaction",
        nr: libc::SYS_rt_sigaction,
        checks: &[Check::Masked {
            arg: 0,
            mask: u32::MAX,
            values: &[SIGSEGV, SIGBUS],
        }],
        condition: "signal SIGSEGV or SIGBUS",
        reason: "Rust's fault handler resets itself to the default action so that a real fault is reported as SIGSEGV/SIGBUS, not as SIGSYS",
    },
    Rule {
        name: "sigaltstack",
        nr: libc::SYS_sigaltstack,
        checks: ANY,
        condition: "any",
        reason: "the Rust runtime disables its alternate signal stack in process::exit",
    },
    Rule {
        name: "getpid",
        nr: libc::SYS_getpid,
        checks: ANY,
        condition: "any",
        reason: "abort() raises SIGABRT at its own process",
    },
    Rule {
        name: "gettid",
        nr: libc::SYS_gettid,
        checks: ANY,
        condition: "any",
        reason: "abort() raises SIGABRT at its own thread",
    },
    Rule {
        name: "tgkill",
        nr: libc::SYS_tgkill,
        checks: &[
            Check::OwnPid { arg: 0 },
            Check::Masked {
                arg: 2,
                mask: u32::MAX,
                values: &[SIGABRT],
            },
        ],
        condition: "tgid == own pid; signal SIGABRT",
        reason: "abort() (a panic while panicking, an allocation failure, Rust's stack-overflow report) so that the parent sees SIGABRT",
    },
    Rule {
        name: "restart_syscall",
        nr: libc::SYS_restart_syscall,
        checks: ANY,
        condition: "any",
        reason: "the kernel resumes an interrupted allowed call this way after SIGSTOP/SIGCONT",
    },
    Rule {
        name: "exit",
        nr: libc::SYS_exit,
        checks: ANY,
        condition: "any",
        reason: "thread exit (the worker has one thread; harmless)",
    },
    Rule {
        name: "exit_group",
        nr: libc::SYS_exit_group,
        checks: ANY,
        condition: "any",
        reason: "process exit: end of input, retirement, violations, panics",
    },
];
