//! The seccomp filter of the serve loop (DESIGN §18.3): the allowlist
//! (`allowlist`, re-exported here) compiled to a BPF program, and its
//! installation.
//!
//! [`ALLOWLIST`] is the complete list of system calls the worker may make
//! once it is locked down, each with its argument conditions and the reason
//! it is needed (measured with `strace` over every operation, host calls,
//! limit trips, errors, panics, aborts and exit; DESIGN §18.3 repeats it).
//! Everything else — and any call from another architecture or the x32 ABI —
//! returns `SECCOMP_RET_KILL_PROCESS`: the kernel kills the whole worker
//! with `SIGSYS`, which its parent reports as a crash.
//!
//! The program is compiled by `seccompiler` (rust-vmm, the compiler behind
//! Firecracker's filters) from the table: each [`Check`] becomes a 64-bit
//! (`Qword`) `MaskedEq` condition whose mask also covers the upper 32 bits,
//! so a checked argument must have them clear, exactly as DESIGN §18.3 says.
//! A check with several accepted values becomes one or-bound rule per
//! value. seccompiler's own architecture check kills a foreign
//! architecture with `SECCOMP_RET_KILL_PROCESS`; x32 calls (number with
//! `__X32_SYSCALL_BIT`) match no rule and so reach the default action, the
//! same kill.
//!
//! [`Filter::build`] allocates; [`Filter::install`] only makes two system
//! calls (`prctl`, `seccomp`, inside `seccompiler::apply_filter_all_threads`)
//! and does not allocate, so it may run in a freshly forked child.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

mod allowlist;

#[cfg(target_arch = "x86_64")]
pub use allowlist::X32_SYSCALL_BIT;
pub use allowlist::{
    ALLOWLIST, AUDIT_ARCH, AUDIT_ARCH_NAME, Check, RET_ALLOW, RET_KILL_PROCESS, Rule,
};

/// The architecture seccompiler compiles the filter for.
#[cfg(target_arch = "x86_64")]
const TARGET_ARCH: TargetArch = TargetArch::x86_64;
/// The architecture seccompiler compiles the filter for.
#[cfg(target_arch = "aarch64")]
const TARGET_ARCH: TargetArch = TargetArch::aarch64;

/// The upper half of a 64-bit argument; every mask includes it, so every
/// checked argument must have those bits clear.
const UPPER_32_BITS: u64 = 0xffff_ffff_0000_0000;

/// A built seccomp program for this process.
#[derive(Debug, Clone)]
pub struct Filter {
    program: BpfProgram,
}

/// The allowlist could not be compiled (a seccompiler backend error: an
/// argument index out of range, a program over the kernel's 4096
/// instructions, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(pub String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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
    pub fn build(pid: u32) -> Result<Self, BuildError> {
        let filter = SeccompFilter::new(
            rules(pid)?,
            SeccompAction::KillProcess,
            SeccompAction::Allow,
            TARGET_ARCH,
        )
        .map_err(|e| BuildError(e.to_string()))?;
        let program = BpfProgram::try_from(filter).map_err(|e| BuildError(e.to_string()))?;
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
    /// system calls, no allocation (an error is an errno, not a message).
    pub fn install(&self) -> Result<(), InstallError> {
        let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(libc::EINVAL);
        seccompiler::apply_filter_all_threads(&self.program).map_err(|e| match e {
            seccompiler::Error::Prctl(e) => InstallError::NoNewPrivs(errno(&e)),
            seccompiler::Error::Seccomp(e) => InstallError::Seccomp(errno(&e)),
            seccompiler::Error::ThreadSync(tid) => InstallError::Thread(tid),
            // An empty program (never built) or a compile error (not
            // raised when installing): the kernel would refuse it too.
            _ => InstallError::Seccomp(libc::EINVAL),
        })
    }
}

/// The allowlist as seccompiler rules: per system call number, or-bound
/// rules of and-bound conditions; an empty rule list allows any arguments.
/// A check with several accepted values multiplies out into one rule per
/// combination (the table has at most one multi-valued check per call).
fn rules(pid: u32) -> Result<BTreeMap<i64, Vec<SeccompRule>>, BuildError> {
    let compile = |e: seccompiler::BackendError| BuildError(e.to_string());
    let mut map = BTreeMap::new();
    for rule in ALLOWLIST {
        // Each element: the conditions of one or-bound alternative.
        let mut alternatives: Vec<Vec<SeccompCondition>> = vec![Vec::new()];
        for check in rule.checks {
            let (arg, mask, values): (u8, u32, Vec<u32>) = match *check {
                Check::Masked { arg, mask, values } => (arg, mask, values.to_vec()),
                Check::OwnPid { arg } => (arg, u32::MAX, vec![pid]),
            };
            if values.is_empty() {
                return Err(BuildError(format!("{} has an empty condition", rule.name)));
            }
            let mut next = Vec::with_capacity(alternatives.len() * values.len());
            for conditions in &alternatives {
                for value in &values {
                    let condition = SeccompCondition::new(
                        arg,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(UPPER_32_BITS | u64::from(mask)),
                        u64::from(*value),
                    )
                    .map_err(compile)?;
                    let mut extended = conditions.clone();
                    extended.push(condition);
                    next.push(extended);
                }
            }
            alternatives = next;
        }
        let chain = if rule.checks.is_empty() {
            Vec::new()
        } else {
            alternatives
                .into_iter()
                .map(SeccompRule::new)
                .collect::<Result<Vec<_>, _>>()
                .map_err(compile)?
        };
        if map.insert(rule.nr, chain).is_some() {
            return Err(BuildError(format!("{} is listed twice", rule.name)));
        }
    }
    Ok(map)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::allowlist::*;
    use super::*;
    use seccompiler::sock_filter;

    const PID: u32 = 4242;

    fn program() -> BpfProgram {
        Filter::build(PID).unwrap().program
    }

    /// Run `program` on a `seccomp_data` image (little-endian words) the
    /// way the kernel would: the classic BPF subset seccompiler emits
    /// (word loads, `and`, `ja`, `jeq`/`jgt`/`jge` against constants,
    /// `ret`). `None` for a program that runs off its end, reads outside the
    /// data or uses another opcode (the kernel rejects all three).
    fn run(program: &[sock_filter], data: &[u8; 64]) -> Option<u32> {
        run_counted(program, data).map(|(action, _)| action)
    }

    /// [`run`], also returning how many instructions ran.
    fn run_counted(program: &[sock_filter], data: &[u8; 64]) -> Option<(u32, usize)> {
        const LD_W_ABS: u16 = 0x20;
        const ALU_AND_K: u16 = 0x54;
        const JMP_JA: u16 = 0x05;
        const JMP_JEQ_K: u16 = 0x15;
        const JMP_JGT_K: u16 = 0x25;
        const JMP_JGE_K: u16 = 0x35;
        const RET_K: u16 = 0x06;
        let mut accumulator: u32 = 0;
        let mut pc = 0usize;
        let mut steps = 0usize;
        while let Some(insn) = program.get(pc) {
            pc += 1;
            steps += 1;
            let holds = match insn.code {
                LD_W_ABS => {
                    let at = usize::try_from(insn.k).ok()?;
                    let word = data.get(at..at + 4)?;
                    accumulator = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    continue;
                }
                ALU_AND_K => {
                    accumulator &= insn.k;
                    continue;
                }
                RET_K => return Some((insn.k, steps)),
                JMP_JA => {
                    pc += usize::try_from(insn.k).ok()?;
                    continue;
                }
                JMP_JEQ_K => accumulator == insn.k,
                JMP_JGT_K => accumulator > insn.k,
                JMP_JGE_K => accumulator >= insn.k,
                _ => return None,
            };
            pc += usize::from(if holds { insn.jt } else { insn.jf });
        }
        None
    }

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
        run(&program(), &data(AUDIT_ARCH, nr, args)).unwrap()
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
        let program = program();
        assert!(program.len() < 300, "{}", program.len());
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

    /// The table read directly (DESIGN §18.3): the verdict the compiled
    /// program must give.
    fn table_allows(nr: libc::c_long, args: [u64; 6]) -> bool {
        ALLOWLIST.iter().any(|rule| {
            rule.nr == nr
                && rule.checks.iter().all(|check| {
                    let (arg, mask, values): (u8, u32, &[u32]) = match *check {
                        Check::Masked { arg, mask, values } => (arg, mask, values),
                        Check::OwnPid { arg } => (arg, u32::MAX, &[PID]),
                    };
                    let value = args[usize::from(arg)];
                    value >> 32 == 0
                        && u32::try_from(value).is_ok_and(|low| values.contains(&(low & mask)))
                })
        })
    }

    #[test]
    fn the_program_gives_the_tables_verdict_on_every_call_and_argument_mix() {
        // Values around every boundary the conditions name, and the upper
        // 32 bits set.
        let interesting: Vec<u64> = [
            0_u64,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            11,
            31,
            0x01,
            0x03,
            0x07,
            0x0f,
            0x10,
            0x20,
            0x21,
            0x22,
            0x23,
            0x24,
            0x26,
            0x2a,
            0x122,
            128,
            129,
            130,
            131,
            137,
            138,
            137 | 256,
            129 | 256,
            3 | 128,
            6 | 128,
            9 | 128,
            u64::from(PID),
            u64::from(PID) + 1,
        ]
        .into_iter()
        .flat_map(|v| [v, v | (1 << 32), v | 0xffff_ffff_0000_0000])
        .chain([u64::MAX, u64::from(u32::MAX)])
        .collect();
        let program = program();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            // xorshift64: a fixed, reproducible sequence.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let numbers: Vec<libc::c_long> = (0..460).chain(ALLOWLIST.iter().map(|r| r.nr)).collect();
        let mut allowed_seen = 0;
        for round in 0..60_000 {
            let nr = if round % 2 == 0 {
                ALLOWLIST[usize::try_from(next() % ALLOWLIST.len() as u64).unwrap()].nr
            } else {
                numbers[usize::try_from(next() % numbers.len() as u64).unwrap()]
            };
            let mut args = [0u64; 6];
            for arg in &mut args {
                *arg = interesting[usize::try_from(next() % interesting.len() as u64).unwrap()];
            }
            let expected = table_allows(nr, args);
            allowed_seen += usize::from(expected);
            let got = run(&program, &data(AUDIT_ARCH, nr, args));
            let want = if expected {
                RET_ALLOW
            } else {
                RET_KILL_PROCESS
            };
            assert_eq!(got, Some(want), "nr {nr} args {args:x?}");
        }
        // The mix reaches both verdicts often.
        assert!(allowed_seen > 5_000, "{allowed_seen}");
    }

    /// DESIGN §18.6: the serve loop's two calls per request stay short paths
    /// through the program (on x86_64 they are its first two numbers).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_serve_loop_calls_take_short_paths() {
        let program = program();
        let steps = |nr, fd| {
            let (action, steps) =
                run_counted(&program, &data(AUDIT_ARCH, nr, [fd, 0, 1, 0, 0, 0])).unwrap();
            assert_eq!(action, RET_ALLOW);
            steps
        };
        assert_eq!(steps(libc::SYS_read, 0), 12);
        assert_eq!(steps(libc::SYS_write, 3), 14);
        assert_eq!(steps(libc::SYS_write, 2), 21);
    }

    #[test]
    fn kills_a_foreign_architecture() {
        let program = program();
        // i386 (int 0x80 on x86_64) or arm (compat on aarch64).
        for arch in [0x4000_0003_u32, 0x4000_0028, 0] {
            let image = data(arch, libc::SYS_read, [0; 6]);
            assert_eq!(run(&program, &image), Some(RET_KILL_PROCESS));
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
