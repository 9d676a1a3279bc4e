//! The seccomp allowlist of the serve loop, as data, and its BPF program.
//!
//! [`ALLOWLIST`] is the complete list of system calls the worker may make
//! once it is locked down, each with its argument conditions and the reason
//! it is needed (measured with `strace` over every operation, host calls,
//! limit trips, errors, panics, aborts and exit; SPEC.md §18 repeats it).
//! Everything else — and any call from another architecture or the x32 ABI —
//! returns `SECCOMP_RET_KILL_PROCESS`: the kernel kills the whole worker
//! with `SIGSYS`, which its parent reports as a crash.
//!
//! [`Filter::build`] allocates; [`Filter::install`] only makes two system
//! calls (`prctl`, `seccomp`), so it may run in a freshly forked child.

use super::bpf::{AssembleError, Assembler, Insn, Target};

/// [`super::FRAME_FD`] as the filter compares it.
const FRAME_FD: u32 = super::FRAME_FD.cast_unsigned();

/// `AUDIT_ARCH_*` of the architecture this worker was built for
/// (`EM_*` | `__AUDIT_ARCH_64BIT` | `__AUDIT_ARCH_LE`, linux/audit.h).
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
/// number (`__X32_SYSCALL_BIT`); the filter kills them explicitly.
#[cfg(target_arch = "x86_64")]
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `SECCOMP_RET_ALLOW`.
pub const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_KILL_PROCESS` (Linux 4.14; older kernels kill the thread,
/// which for this single-threaded worker is the same).
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// Offsets in `struct seccomp_data`.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARGS: u32 = 16;

// Argument values the conditions name (uapi headers; the same on x86_64
// and aarch64).
const PROT_EXEC: u32 = 0x4;
const MAP_PRIVATE: u32 = 0x02;
const MAP_ANONYMOUS: u32 = 0x20;
/// `MAP_TYPE`: the sharing type bits (private, shared, shared-validate,
/// droppable).
const MAP_TYPE: u32 = 0x0f;
const MREMAP_MAYMOVE: u32 = 0x1;
const MADV_DONTNEED: u32 = 4;
const MADV_FREE: u32 = 8;
const FUTEX_WAIT_PRIVATE: u32 = 128;
const FUTEX_WAKE_PRIVATE: u32 = 129;
const FUTEX_WAIT_BITSET_PRIVATE: u32 = 137;
const FUTEX_WAKE_BITSET_PRIVATE: u32 = 138;
const FUTEX_CLOCK_REALTIME: u32 = 256;
const SIGBUS: u32 = 7;
const SIGABRT: u32 = 6;
const SIGSEGV: u32 = 11;

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
    /// `args[arg]` is this process's pid (filled in by [`Filter::build`]).
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

/// The allowlist, hot calls first (the filter tests them in this order).
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

/// A built seccomp program for this process.
#[derive(Debug, Clone)]
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

/// Why installing the filter failed: the `errno` of `prctl` or `seccomp`,
/// or the id of a thread that could not be synchronised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallError {
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed with this errno.
    NoNewPrivs(i32),
    /// `seccomp(SECCOMP_SET_MODE_FILTER)` failed with this errno.
    Seccomp(i32),
    /// Thread synchronisation failed at this thread id.
    Thread(i64),
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoNewPrivs(errno) => write!(
                f,
                "prctl(PR_SET_NO_NEW_PRIVS) failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Self::Seccomp(errno) => write!(
                f,
                "seccomp(SECCOMP_SET_MODE_FILTER) failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Self::Thread(tid) => write!(f, "thread {tid} could not take the filter"),
        }
    }
}

impl Filter {
    /// The allowlist as a program for the process `pid` (the `tgkill`
    /// condition names it).
    pub fn build(pid: u32) -> Result<Self, AssembleError> {
        let program = assemble(pid)?
            .into_iter()
            .map(|insn| libc::sock_filter {
                code: insn.code,
                jt: insn.jt,
                jf: insn.jf,
                k: insn.k,
            })
            .collect();
        Ok(Self { program })
    }

    /// Number of BPF instructions.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Whether the program is empty (never, for a built filter).
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }

    /// Set no-new-privileges, then install the filter on every thread of
    /// the process (`SECCOMP_FILTER_FLAG_TSYNC`). Async-signal-safe: two
    /// system calls, no allocation.
    pub fn install(&self) -> Result<(), InstallError> {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(InstallError::NoNewPrivs(errno()));
        }
        let Ok(len) = u16::try_from(self.program.len()) else {
            return Err(InstallError::Seccomp(libc::EINVAL));
        };
        let prog = libc::sock_fprog {
            len,
            filter: self.program.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `len` initialised instructions that
        // outlive the call; the kernel copies the program.
        let done = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &raw const prog,
            )
        };
        match done {
            0 => Ok(()),
            tid if tid > 0 => Err(InstallError::Thread(tid)),
            _ => Err(InstallError::Seccomp(errno())),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

fn arg_low(arg: u8) -> u32 {
    OFFSET_ARGS + 8 * u32::from(arg)
}

fn arg_high(arg: u8) -> u32 {
    arg_low(arg) + 4
}

/// The program: check the architecture, kill x32 calls, then one block per
/// rule. A block compares the number; on a match it checks the conditions
/// and returns ALLOW, or KILL_PROCESS at the first one that fails.
fn assemble(pid: u32) -> Result<Vec<Insn>, AssembleError> {
    let mut asm = Assembler::new();
    let kill = asm.label();
    asm.load(OFFSET_ARCH);
    asm.jeq(AUDIT_ARCH, Target::Next, Target::To(kill));
    asm.load(OFFSET_NR);
    #[cfg(target_arch = "x86_64")]
    asm.jge(X32_SYSCALL_BIT, Target::To(kill), Target::Next);
    for rule in ALLOWLIST {
        let nr = u32::try_from(rule.nr)
            .map_err(|_| AssembleError(format!("{} has no 32-bit number", rule.name)))?;
        let next_rule = asm.label();
        let refuse = asm.label();
        asm.jeq(nr, Target::Next, Target::To(next_rule));
        for check in rule.checks {
            let (arg, mask, own_pid, values): (u8, u32, [u32; 1], &[u32]) = match *check {
                Check::Masked { arg, mask, values } => (arg, mask, [0], values),
                Check::OwnPid { arg } => (arg, u32::MAX, [pid], &[]),
            };
            let values = if values.is_empty() {
                &own_pid[..]
            } else {
                values
            };
            asm.load(arg_high(arg));
            asm.jeq(0, Target::Next, Target::To(refuse));
            asm.load(arg_low(arg));
            if mask != u32::MAX {
                asm.and(mask);
            }
            let passed = asm.label();
            let (last, others) = values
                .split_last()
                .ok_or_else(|| AssembleError(format!("{} has an empty condition", rule.name)))?;
            for value in others {
                asm.jeq(*value, Target::To(passed), Target::Next);
            }
            asm.jeq(*last, Target::Next, Target::To(refuse));
            asm.place(passed);
        }
        asm.ret(RET_ALLOW);
        asm.place(refuse);
        asm.ret(RET_KILL_PROCESS);
        asm.place(next_rule);
    }
    asm.place(kill);
    asm.ret(RET_KILL_PROCESS);
    asm.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::bpf;
    use super::*;

    const PID: u32 = 4242;

    fn data(arch: u32, nr: libc::c_long, args: [u64; 6]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[0..4].copy_from_slice(&(u32::try_from(nr).unwrap()).to_le_bytes());
        out[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        out
    }

    fn verdict(nr: libc::c_long, args: [u64; 6]) -> u32 {
        let program = assemble(PID).unwrap();
        bpf::run(&program, &data(AUDIT_ARCH, nr, args)).unwrap()
    }

    fn allowed(nr: libc::c_long, args: [u64; 6]) -> bool {
        match verdict(nr, args) {
            RET_ALLOW => true,
            RET_KILL_PROCESS => false,
            other => panic!("unexpected action {other:#x}"),
        }
    }

    #[test]
    fn the_program_fits_and_every_rule_has_a_reason() {
        let program = assemble(PID).unwrap();
        assert!(program.len() < 200, "{}", program.len());
        for rule in ALLOWLIST {
            assert!(!rule.reason.is_empty() && !rule.condition.is_empty());
        }
        let mut names: Vec<_> = ALLOWLIST.iter().map(|r| r.nr).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            ALLOWLIST.len(),
            "a system call is listed twice"
        );
    }

    #[test]
    fn kills_a_foreign_architecture() {
        let program = assemble(PID).unwrap();
        // i386 (int 0x80 on x86_64) or arm (compat on aarch64).
        for arch in [0x4000_0003_u32, 0x4000_0028, 0] {
            let image = data(arch, libc::SYS_read, [0; 6]);
            assert_eq!(bpf::run(&program, &image), Some(RET_KILL_PROCESS));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn kills_x32_system_calls() {
        // x32 read is 0 | __X32_SYSCALL_BIT.
        assert!(!allowed(0x4000_0000, [0; 6]));
        assert!(!allowed(0x4000_0000 | 1, [2, 0, 0, 0, 0, 0]));
    }

    #[test]
    fn allows_the_serve_loop_io_and_nothing_else() {
        assert!(allowed(libc::SYS_read, [0, 0x1000, 8192, 0, 0, 0]));
        assert!(!allowed(libc::SYS_read, [3, 0, 0, 0, 0, 0]));
        assert!(!allowed(libc::SYS_read, [1 << 32, 0, 0, 0, 0, 0]));
        assert!(allowed(libc::SYS_write, [2, 0, 1, 0, 0, 0]));
        assert!(allowed(libc::SYS_write, [3, 0, 1, 0, 0, 0]));
        assert!(!allowed(libc::SYS_write, [4, 0, 1, 0, 0, 0]));
        assert!(!allowed(libc::SYS_write, [1, 0, 1, 0, 0, 0]));
        assert!(!allowed(libc::SYS_write, [0, 0, 1, 0, 0, 0]));
    }

    #[test]
    fn memory_calls_cannot_make_executable_or_shared_mappings() {
        let anon = u64::from(MAP_PRIVATE | MAP_ANONYMOUS);
        let rw = u64::from(libc::PROT_READ.cast_unsigned() | libc::PROT_WRITE.cast_unsigned());
        assert!(allowed(libc::SYS_mmap, [0, 4096, rw, anon, u64::MAX, 0]));
        assert!(allowed(
            libc::SYS_mmap,
            [
                0,
                4096,
                0,
                anon | u64::from(libc::MAP_NORESERVE.cast_unsigned()),
                0,
                0
            ]
        ));
        assert!(!allowed(
            libc::SYS_mmap,
            [0, 4096, rw | u64::from(PROT_EXEC), anon, 0, 0]
        ));
        assert!(!allowed(
            libc::SYS_mmap,
            [0, 4096, rw, u64::from(MAP_PRIVATE), 3, 0]
        ));
        assert!(!allowed(
            libc::SYS_mmap,
            [0, 4096, rw, u64::from(MAP_ANONYMOUS | 0x01), 0, 0]
        ));
        assert!(!allowed(
            libc::SYS_mmap,
            [0, 4096, rw | (1 << 32), anon, 0, 0]
        ));
        assert!(allowed(libc::SYS_mremap, [0, 1, 2, 1, 0, 0]));
        assert!(allowed(libc::SYS_mremap, [0, 1, 2, 0, 0, 0]));
        assert!(!allowed(libc::SYS_mremap, [0, 1, 2, 1 | 2, 0, 0]));
        assert!(!allowed(libc::SYS_mprotect, [0, 4096, 7, 0, 0, 0]));
        assert!(allowed(libc::SYS_madvise, [0, 4096, 4, 0, 0, 0]));
        assert!(!allowed(libc::SYS_madvise, [0, 4096, 9, 0, 0, 0]));
        assert!(allowed(libc::SYS_brk, [0; 6]));
        assert!(allowed(libc::SYS_munmap, [0; 6]));
    }

    #[test]
    fn futex_allows_only_private_wait_and_wake() {
        for op in [128, 129, 137, 138, 137 | 256] {
            assert!(allowed(libc::SYS_futex, [0, op, 0, 0, 0, 0]), "{op}");
        }
        // Shared wait, requeue, PI lock.
        for op in [0, 1, 3 | 128, 6 | 128] {
            assert!(!allowed(libc::SYS_futex, [0, op, 0, 0, 0, 0]), "{op}");
        }
    }

    #[test]
    fn abort_may_signal_only_itself_with_sigabrt() {
        let pid = u64::from(PID);
        assert!(allowed(libc::SYS_tgkill, [pid, 7, 6, 0, 0, 0]));
        assert!(!allowed(libc::SYS_tgkill, [pid + 1, 7, 6, 0, 0, 0]));
        assert!(!allowed(libc::SYS_tgkill, [pid, 7, 9, 0, 0, 0]));
        assert!(!allowed(libc::SYS_kill, [pid, 6, 0, 0, 0, 0]));
        assert!(allowed(libc::SYS_rt_sigaction, [11, 0, 0, 8, 0, 0]));
        assert!(!allowed(libc::SYS_rt_sigaction, [31, 0, 0, 8, 0, 0]));
    }

    #[test]
    fn kills_what_an_exploit_would_reach_for() {
        let mut denied = vec![
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_openat,
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ptrace,
            libc::SYS_mprotect,
            libc::SYS_close,
            libc::SYS_ioctl,
            libc::SYS_prctl,
            libc::SYS_seccomp,
            libc::SYS_getrandom,
            libc::SYS_kill,
            libc::SYS_bpf,
            libc::SYS_io_uring_setup,
            libc::SYS_memfd_create,
            libc::SYS_process_vm_writev,
            libc::SYS_setrlimit,
            libc::SYS_prlimit64,
            libc::SYS_personality,
            libc::SYS_unshare,
        ];
        #[cfg(target_arch = "x86_64")]
        denied.extend([
            libc::SYS_open,
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_creat,
        ]);
        for nr in denied {
            assert!(!allowed(nr, [0; 6]), "system call {nr} is allowed");
        }
    }
}
