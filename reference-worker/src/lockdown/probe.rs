//! Test-only probes: forbidden or crashing actions the worker performs at
//! its first request after `initialize`, so tests can watch the lockdown
//! kill it.
//!
//! The probe is chosen by the hidden worker argument
//! `--lockdown-test-probe=NAME`. This module — and so the argument — exists
//! only in debug builds (`debug_assertions`: what `cargo test` and `cargo
//! build` produce) and in builds with the cargo feature
//! `lockdown-test-hooks` (to test a release build); release builds ignore
//! the argument. Nothing reachable from guest Lua or from the wire selects a
//! probe.
//!
//! Why not only a feature: the parent's tests need the probe in the
//! `quirl-lua` binary, and any plain `cargo build` of that binary into the
//! same target directory (the conformance tests run one) would replace a
//! feature-enabled build with one without it.

use std::ffi::OsString;
use std::sync::OnceLock;

/// The hidden argument prefix.
pub const PROBE_ARGUMENT: &str = "--lockdown-test-probe=";

/// What a probe does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `execve("/nonexistent", …)` (`ENOENT` without lockdown).
    Execve,
    /// `socket(AF_INET, SOCK_STREAM)`, closed again without lockdown.
    Socket,
    /// `openat("/dev/null")`, closed again without lockdown.
    Open,
    /// `fork()` (a raw `clone` on every architecture); the child exits at
    /// once and is reaped without lockdown.
    Fork,
    /// `mprotect` of a heap page to read+execute.
    MprotectExec,
    /// An anonymous `mmap` with `PROT_EXEC`.
    MmapExec,
    /// `write` to stdout (fd 1).
    WriteStdout,
    /// A Rust panic (exit status 101, not a seccomp kill).
    Panic,
    /// `std::process::abort()` (SIGABRT, not a seccomp kill).
    Abort,
    /// A write through a null pointer (SIGSEGV, not a seccomp kill).
    Segfault,
    /// Unbounded recursion into the main thread's guard page (Rust reports
    /// the overflow and aborts: SIGABRT).
    StackOverflow,
    /// The Landlock domain alone (DESIGN §18.3 step 4): the lockdown skips
    /// the seccomp filter, then the probe opens `/dev/null` and exits with
    /// [`LANDLOCK_DENIED_EXIT`] if the kernel refused (`EACCES`),
    /// [`LANDLOCK_OPENED_EXIT`] if the file opened, or
    /// [`LANDLOCK_OTHER_EXIT`] on any other error.
    LandlockOpen,
}

/// Exit status of the `landlock-open` probe when the open was refused.
pub const LANDLOCK_DENIED_EXIT: i32 = 86;
/// Exit status of the `landlock-open` probe when the file opened.
pub const LANDLOCK_OPENED_EXIT: i32 = 87;
/// Exit status of the `landlock-open` probe on another error.
pub const LANDLOCK_OTHER_EXIT: i32 = 88;

/// Whether the armed probe wants the lockdown without its seccomp filter
/// (only `landlock-open`, so the Landlock domain is what answers).
pub fn skips_seccomp() -> bool {
    ARMED.get() == Some(&Probe::LandlockOpen)
}

impl Probe {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "execve" => Self::Execve,
            "socket" => Self::Socket,
            "open" => Self::Open,
            "fork" => Self::Fork,
            "mprotect-exec" => Self::MprotectExec,
            "mmap-exec" => Self::MmapExec,
            "write-stdout" => Self::WriteStdout,
            "panic" => Self::Panic,
            "abort" => Self::Abort,
            "segfault" => Self::Segfault,
            "stack-overflow" => Self::StackOverflow,
            "landlock-open" => Self::LandlockOpen,
            _ => return None,
        })
    }
}

static ARMED: OnceLock<Probe> = OnceLock::new();

/// Arm the probe named by `--lockdown-test-probe=NAME` among `args`.
pub fn arm_from_args(args: &[OsString]) {
    for arg in args {
        if let Some(name) = arg.to_str().and_then(|a| a.strip_prefix(PROBE_ARGUMENT))
            && let Some(probe) = Probe::parse(name)
        {
            let _ = ARMED.set(probe);
        }
    }
}

/// Run the armed probe (at most once per process).
pub fn fire() {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(probe) = ARMED.get() else {
        return;
    };
    if FIRED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    run(*probe);
}

fn run(probe: Probe) {
    // SAFETY (whole function): each probe makes one raw system call with
    // valid pointers to locals or literals; without lockdown the resources
    // it creates are released again.
    unsafe {
        match probe {
            Probe::Execve => {
                let argv = [c"/nonexistent".as_ptr(), std::ptr::null()];
                let envp = [std::ptr::null::<libc::c_char>()];
                libc::execve(c"/nonexistent".as_ptr(), argv.as_ptr(), envp.as_ptr());
            }
            Probe::Socket => {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            Probe::Open => {
                let fd = libc::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_RDONLY);
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            Probe::Fork => {
                let pid = libc::syscall(
                    libc::SYS_clone,
                    libc::SIGCHLD,
                    0_usize,
                    0_usize,
                    0_usize,
                    0_usize,
                );
                if pid == 0 {
                    libc::_exit(0);
                }
                if let Ok(pid) = libc::pid_t::try_from(pid)
                    && pid > 0
                {
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
            Probe::MprotectExec => {
                let page = Box::new([0u8; 8192]);
                let page_size = 4096usize;
                let start = (page.as_ptr() as usize).next_multiple_of(page_size);
                libc::mprotect(
                    start as *mut libc::c_void,
                    page_size,
                    libc::PROT_READ | libc::PROT_EXEC,
                );
                libc::mprotect(
                    start as *mut libc::c_void,
                    page_size,
                    libc::PROT_READ | libc::PROT_WRITE,
                );
                drop(page);
            }
            Probe::MmapExec => {
                let at = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if at != libc::MAP_FAILED {
                    libc::munmap(at, 4096);
                }
            }
            Probe::WriteStdout => {
                libc::write(1, b"x".as_ptr().cast(), 1);
            }
            Probe::Panic => panic!("lockdown test probe: panic"),
            Probe::Abort => std::process::abort(),
            Probe::Segfault => {
                std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1);
            }
            Probe::StackOverflow => {
                std::hint::black_box(recurse(std::hint::black_box(1)));
            }
            Probe::LandlockOpen => {
                let fd = libc::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_RDONLY);
                let status = if fd >= 0 {
                    libc::close(fd);
                    LANDLOCK_OPENED_EXIT
                } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES) {
                    LANDLOCK_DENIED_EXIT
                } else {
                    LANDLOCK_OTHER_EXIT
                };
                libc::_exit(status);
            }
        }
    }
}

/// Recursion the optimiser cannot turn into a loop.
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    if depth == 0 {
        return 0;
    }
    frame[0].wrapping_add(recurse(std::hint::black_box(depth + 1)))
}
