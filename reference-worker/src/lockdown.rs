//! What the worker gives up once its VM exists (DESIGN §18.3).
//!
//! [`after_vm_built`] runs once, after a valid `initialize` built the VM and
//! before the worker answers it — so before any guest code runs. With
//! [`Lockdown::On`] (what the `quirl-worker` binary and `quirl-lua
//! --internal-lua-worker-v1` use unless given [`NO_LOCKDOWN_ARGUMENT`]) it:
//!
//! 1. warms up what would otherwise make a system call lazily later
//!    (`HashMap` random keys, the clock);
//! 2. clears `READ_IMPLIES_EXEC` from the personality, so that readable
//!    mappings are not implicitly executable;
//! 3. sets `PR_SET_NO_NEW_PRIVS` and drops every capability, the bounding
//!    set included ([`capabilities`]);
//! 4. enters a Landlock domain with no filesystem access at all (every
//!    filesystem right of the kernel's ABI handled, no rule), no TCP bind or
//!    connect, and no signal or abstract-socket reach outside the domain,
//!    where the kernel offers Landlock ([`landlock`]);
//! 5. installs the seccomp allowlist of [`filter::ALLOWLIST`] on every
//!    thread, with `SECCOMP_RET_KILL_PROCESS` for everything else (the
//!    program is compiled by `seccompiler`, see [`filter`]).
//!
//! Any failure is fatal: the worker exits 1 without answering `initialize`.
//!
//! The resource limits (address space, core, open files, file size,
//! processes) and the descriptor hygiene are the parent's job, applied
//! before `exec` (reference parent: `rlimits` module); DESIGN.md §18 has the
//! whole picture.
//!
//! The library default is [`Lockdown::Off`]: `serve` called in-process (tests,
//! embedding) must never lock down its host process.
//!
//! Platforms: the filter exists for Linux on x86_64 and aarch64. Elsewhere
//! (other architectures: no-new-privileges only; other systems: nothing)
//! the worker runs with the Lua sandbox alone, and [`report`] (the binary's
//! [`REPORT_ARGUMENT`]) says so.

#[cfg(target_os = "linux")]
pub mod capabilities;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub mod filter;
#[cfg(target_os = "linux")]
pub mod landlock;
#[cfg(any(debug_assertions, feature = "lockdown-test-hooks"))]
pub mod probe;

use std::fmt;
use std::fmt::Write as _;

/// The descriptor the worker binaries write frames to: a duplicate of the
/// stderr pipe, made at start, after which fd 2 points at `/dev/null` (see
/// `run_stdio_worker`). The filter allows `write` to it and to fd 2.
pub const FRAME_FD: i32 = 3;

/// Worker argument that turns the lockdown off (debugging: strace, gdb,
/// sanitizers). Off by default; `quirl-lua --no-lockdown` passes it on.
pub const NO_LOCKDOWN_ARGUMENT: &str = "--no-lockdown";

/// Worker argument that prints the capability report ([`report`]) on
/// stdout and exits 0 instead of serving.
pub const REPORT_ARGUMENT: &str = "--lockdown-report";

/// Whether [`after_vm_built`] locks the process down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lockdown {
    /// Do nothing (library default; `--no-lockdown`).
    #[default]
    Off,
    /// No-new-privileges and the seccomp allowlist (worker binaries).
    On,
}

impl Lockdown {
    /// `Off` if `args` contain [`NO_LOCKDOWN_ARGUMENT`], else `On`.
    pub fn from_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Self {
        if args
            .iter()
            .any(|arg| arg.as_ref() == std::ffi::OsStr::new(NO_LOCKDOWN_ARGUMENT))
        {
            Self::Off
        } else {
            Self::On
        }
    }
}

/// A lockdown step that could not be applied; the worker treats it as
/// fatal and exits without answering `initialize`.
#[derive(Debug, Clone)]
pub struct LockdownError(pub String);

impl fmt::Display for LockdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker lockdown failed: {}", self.0)
    }
}

impl std::error::Error for LockdownError {}

/// What this build can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// No-new-privileges and the seccomp allowlist.
    Seccomp {
        /// The architecture the filter checks (`AUDIT_ARCH_*`).
        arch: &'static str,
    },
    /// No-new-privileges only: Linux, but no filter for this architecture.
    NoNewPrivsOnly,
    /// Nothing: not Linux.
    Unavailable,
}

/// What [`after_vm_built`] does on this platform.
pub fn capability() -> Capability {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        Capability::Seccomp {
            arch: filter::AUDIT_ARCH_NAME,
        }
    }
    #[cfg(all(
        target_os = "linux",
        not(any(target_arch = "x86_64", target_arch = "aarch64"))
    ))]
    {
        Capability::NoNewPrivsOnly
    }
    #[cfg(not(target_os = "linux"))]
    {
        Capability::Unavailable
    }
}

/// Lock the process down if `mode` says so (see the module docs).
pub fn after_vm_built(mode: Lockdown) -> Result<(), LockdownError> {
    match mode {
        Lockdown::Off => Ok(()),
        Lockdown::On => apply(),
    }
}

/// Lock this process down now, whatever the mode: no-new-privileges and,
/// where available, the seccomp allowlist. Irreversible.
pub fn apply() -> Result<(), LockdownError> {
    #[cfg(target_os = "linux")]
    {
        warm_up();
        clear_read_implies_exec()?;
        set_no_new_privs()?;
        capabilities::drop_all()?;
        // Before the filter, which kills the Landlock system calls.
        landlock::enter_empty_domain()?;
        #[cfg(any(debug_assertions, feature = "lockdown-test-hooks"))]
        if probe::skips_seccomp() {
            return Ok(());
        }
    }
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        let filter = filter::Filter::build(std::process::id())
            .map_err(|e| LockdownError(format!("the seccomp program does not compile: {e}")))?;
        filter.install().map_err(|e| LockdownError(e.to_string()))?;
    }
    Ok(())
}

/// Called before each request after `initialize`; runs the armed test
/// probe in debug builds and builds with the `lockdown-test-hooks` feature,
/// nothing otherwise (release builds).
#[inline]
pub fn before_request() {
    #[cfg(any(debug_assertions, feature = "lockdown-test-hooks"))]
    probe::fire();
}

/// Make the system calls that would otherwise happen lazily after the
/// filter is in place: the per-thread `HashMap` keys (`getrandom`) and the
/// first clock read.
#[cfg(target_os = "linux")]
fn warm_up() {
    let _ = std::hash::RandomState::new();
    let _ = std::time::Instant::now();
}

/// Raw `libc::personality`: neither rustix nor std wraps `personality(2)`
/// (rustix 1.1 has no such function), so these two calls stay `unsafe`.
#[cfg(target_os = "linux")]
fn clear_read_implies_exec() -> Result<(), LockdownError> {
    // SAFETY: personality(0xffffffff) takes an integer, touches no memory
    // of ours and only queries the persona.
    let persona = unsafe { libc::personality(0xffff_ffff) };
    if persona < 0 {
        return Err(LockdownError(format!(
            "personality query failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    if persona & libc::READ_IMPLIES_EXEC != 0 {
        let cleared = (persona & !libc::READ_IMPLIES_EXEC).cast_unsigned();
        // SAFETY: personality takes an integer and touches no memory of
        // ours; it sets the persona to the queried one minus one flag.
        if unsafe { libc::personality(libc::c_ulong::from(cleared)) } < 0 {
            return Err(LockdownError(format!(
                "clearing READ_IMPLIES_EXEC failed: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn set_no_new_privs() -> Result<(), LockdownError> {
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| LockdownError(format!("prctl(PR_SET_NO_NEW_PRIVS) failed: {e}")))
}

/// The capability report: platform, what the lockdown does here, and the
/// allowlist with the reason for each system call.
pub fn report() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "quirl-worker lockdown (reference worker, DESIGN.md §18)\nplatform: {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    match capability() {
        Capability::Seccomp { arch } => {
            let _ = writeln!(
                out,
                "lockdown: available: after initialize, PR_SET_NO_NEW_PRIVS and a seccomp filter \
                 (architecture {arch}; x32 and foreign-architecture calls killed; anything not \
                 listed below: SECCOMP_RET_KILL_PROCESS, the worker dies by SIGSYS)"
            );
            #[cfg(all(
                target_os = "linux",
                any(target_arch = "x86_64", target_arch = "aarch64")
            ))]
            {
                if let Ok(built) = filter::Filter::build(std::process::id()) {
                    let _ = writeln!(out, "filter: {} BPF instructions", built.len());
                }
                let _ = writeln!(out, "allowed system calls ({}):", filter::ALLOWLIST.len());
                for rule in filter::ALLOWLIST {
                    let _ = writeln!(
                        out,
                        "  {:<16} {:<4} [{}] {}",
                        rule.name, rule.nr, rule.condition, rule.reason
                    );
                }
            }
        }
        Capability::NoNewPrivsOnly => {
            let _ = writeln!(
                out,
                "lockdown: partial: PR_SET_NO_NEW_PRIVS only; no seccomp filter for this \
                 architecture (the Lua sandbox and the parent's resource limits still apply)"
            );
        }
        Capability::Unavailable => {
            let _ = writeln!(
                out,
                "lockdown: unavailable on this system: no no-new-privileges, no seccomp (the Lua \
                 sandbox and the parent's resource limits still apply)"
            );
        }
    }
    let _ = writeln!(out, "capabilities: {}", capabilities_summary());
    let _ = writeln!(out, "landlock: {}", landlock_summary());
    let _ = writeln!(
        out,
        "switch: {NO_LOCKDOWN_ARGUMENT} (worker argument; quirl-lua --no-lockdown) turns it off"
    );
    out
}

/// One line: what the Landlock step of the lockdown does on this kernel
/// (the report, `quirl-lua --version --verbose`, `stats`).
pub fn landlock_summary() -> String {
    #[cfg(target_os = "linux")]
    {
        landlock::summary()
    }
    #[cfg(not(target_os = "linux"))]
    {
        "unavailable on this system".to_owned()
    }
}

/// One line: what the capability step of the lockdown does here.
pub fn capabilities_summary() -> String {
    #[cfg(target_os = "linux")]
    {
        capabilities::summary()
    }
    #[cfg(not(target_os = "linux"))]
    {
        "unavailable on this system".to_owned()
    }
}

/// One line: the whole lockdown of the reference worker on this system,
/// e.g. `no_new_privs + no capabilities + seccomp (AUDIT_ARCH_X86_64);
/// landlock: …`.
pub fn summary() -> String {
    let seccomp = match capability() {
        Capability::Seccomp { arch } => {
            format!("no_new_privs + no capabilities + seccomp ({arch})")
        }
        Capability::NoNewPrivsOnly => "no_new_privs + no capabilities only".to_owned(),
        Capability::Unavailable => "none".to_owned(),
    };
    format!("{seccomp}; landlock: {}", landlock_summary())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn lockdown_is_on_unless_switched_off() {
        assert_eq!(
            Lockdown::from_args(&["--internal-lua-worker-v1"]),
            Lockdown::On
        );
        assert_eq!(Lockdown::from_args::<&str>(&[]), Lockdown::On);
        assert_eq!(
            Lockdown::from_args(&["--internal-lua-worker-v1", "--no-lockdown"]),
            Lockdown::Off
        );
        assert_eq!(Lockdown::default(), Lockdown::Off);
    }

    #[test]
    fn off_does_nothing_in_process() {
        after_vm_built(Lockdown::Off).unwrap();
        // The test process is still free to open files.
        assert!(std::fs::File::open("/dev/null").is_ok());
    }

    #[test]
    fn the_report_names_the_platform_and_the_switch() {
        let text = report();
        assert!(text.contains("\nlandlock: "), "{text}");
        assert!(
            text.contains("\ncapabilities: every capability dropped"),
            "{text}"
        );
        assert!(text.contains(std::env::consts::ARCH), "{text}");
        assert!(text.contains(NO_LOCKDOWN_ARGUMENT), "{text}");
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            assert!(text.contains("AUDIT_ARCH_X86_64"), "{text}");
            assert!(text.contains("exit_group"), "{text}");
        }
    }
}
