//! What runs in the forked child of a host command, between `fork` and
//! `execve` (DESIGN §16.6): the exact `execve` arguments are built before the
//! fork, so the child allocates nothing; it joins the command's cgroup,
//! takes the steps of every spawned child (`child_setup`: new session,
//! `no_new_privs`, inherited descriptors close-on-exec), restricts itself
//! with the prepared Landlock execute ruleset, resets signal
//! dispositions and the mask, and executes the resolved path (no `PATH`
//! search, no `/bin/sh` fallback).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use quirl_lua_protocol::records::ErrorCode;

use super::exec_ruleset;
use super::grants::ProcessHostConfig;
use super::host_error::HostError;
use crate::cgroup;
use crate::child_process::child_setup;

/// The exact `execve` arguments, built before the fork so the child
/// allocates nothing.
pub(super) struct ExecImage {
    path: CString,
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    empty_mask: libc::sigset_t,
    /// `cgroup.procs` of the command's cgroup, held open by the caller
    /// across the spawn.
    cgroup_procs: Option<std::os::fd::RawFd>,
    /// The Landlock execute ruleset (DESIGN §16.6), held open by the caller
    /// across the spawn.
    exec_ruleset: Option<std::os::fd::RawFd>,
}

// SAFETY: the raw pointers point into the CStrings owned by the same value,
// whose heap buffers never move or change; the value is only read (in the
// forked child).
unsafe impl Send for ExecImage {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for ExecImage {}

impl ExecImage {
    pub(super) fn new(
        path: &Path,
        argv: &[String],
        config: &ProcessHostConfig,
        cgroup_procs: Option<std::os::fd::RawFd>,
        exec_ruleset: Option<std::os::fd::RawFd>,
    ) -> Result<Self, HostError> {
        let nul = || HostError::new(ErrorCode::InvalidArgument, "argument contains a NUL byte");
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| nul())?;
        let argv: Vec<CString> = argv
            .iter()
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| nul())?;
        let envp: Vec<CString> = config
            .environment()
            .iter()
            .map(|(name, value)| {
                let mut entry = Vec::with_capacity(name.len() + 1 + value.len());
                entry.extend_from_slice(name.as_bytes());
                entry.push(b'=');
                entry.extend_from_slice(OsStr::as_bytes(value));
                CString::new(entry)
            })
            .collect::<Result<_, _>>()
            .map_err(|_| nul())?;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|arg| arg.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> =
            envp.iter().map(|entry| entry.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        // SAFETY: zeroed sigset_t is valid storage, which sigemptyset
        // initialises. (rustix has no safe signal-set type; std has none.)
        let empty_mask = unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut mask);
            mask
        };
        Ok(Self {
            path,
            _argv: argv,
            _envp: envp,
            argv_ptrs,
            envp_ptrs,
            empty_mask,
            cgroup_procs,
            exec_ruleset,
        })
    }

    /// Runs in the forked child. Only async-signal-safe system calls.
    pub(super) fn exec(&self) -> io::Result<()> {
        // First, so the rest of this child and the program run inside the
        // command's cgroup (DESIGN §17.2).
        if let Some(procs) = self.cgroup_procs {
            cgroup::enter_in_child(procs)?;
        }
        // New session and group (no controlling terminal), no privilege
        // gains, and descriptors the parent leaked without close-on-exec do
        // not reach the program.
        child_setup::enter_new_session_locked_down()?;
        // After `no_new_privs` (which Landlock requires of an unprivileged
        // process) and before exec: from here on this process and all it
        // starts may execute only the program and its interpreter.
        if let Some(ruleset) = self.exec_ruleset {
            exec_ruleset::restrict_in_child(ruleset)?;
        }
        // SAFETY: every call below is an async-signal-safe system call on
        // arguments prepared before the fork; none allocates. They stay raw
        // `libc` calls because rustix 1.x has no safe signal-disposition,
        // signal-mask or `execve` API (only `unsafe` ones in its `runtime`
        // module), and std has none.
        unsafe {
            // Ignored signals survive exec; start from the defaults.
            for signal in 1..=64 {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::signal(signal, libc::SIG_DFL);
                }
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.empty_mask, std::ptr::null_mut());
            // execve, not execvp: no PATH search and no /bin/sh fallback
            // for files without a recognised format.
            libc::execve(
                self.path.as_ptr(),
                self.argv_ptrs.as_ptr(),
                self.envp_ptrs.as_ptr(),
            );
        }
        Err(io::Error::last_os_error())
    }
}
