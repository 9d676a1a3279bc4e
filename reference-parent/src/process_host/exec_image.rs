//! The exact `execve` arguments of a host command (DESIGN §16.6), built
//! before the clone so that the child (module `command_spawn`) allocates
//! nothing: the resolved path (no `PATH` search, no `/bin/sh` fallback),
//! `argv` with the program word as written, and the complete environment.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use quirl_lua_protocol::records::ErrorCode;

use super::host_error::HostError;

/// The exact `execve` arguments.
pub(super) struct ExecImage {
    path: CString,
    /// The strings the pointer arrays point into (moving a `CString` does
    /// not move its bytes), kept as long as the pointers.
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

// SAFETY: the raw pointers point into the CStrings owned by the same value,
// whose heap buffers never move or change; the value is only read (in the
// cloned child, on its own copy).
unsafe impl Send for ExecImage {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for ExecImage {}

impl ExecImage {
    /// `path` with `argv` and exactly the entries of `environment`.
    pub(super) fn new<'a>(
        path: &Path,
        argv: &[String],
        environment: impl IntoIterator<Item = (&'a str, &'a OsStr)>,
    ) -> Result<Self, HostError> {
        let nul = || HostError::new(ErrorCode::InvalidArgument, "argument contains a NUL byte");
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| nul())?;
        let argv: Vec<CString> = argv
            .iter()
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| nul())?;
        let envp: Vec<CString> = environment
            .into_iter()
            .map(|(name, value)| {
                let mut entry = Vec::with_capacity(name.len() + 1 + value.len());
                entry.extend_from_slice(name.as_bytes());
                entry.push(b'=');
                entry.extend_from_slice(value.as_bytes());
                CString::new(entry)
            })
            .collect::<Result<_, _>>()
            .map_err(|_| nul())?;
        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        Ok(Self {
            path,
            _argv: argv,
            _envp: envp,
            argv_ptrs,
            envp_ptrs,
        })
    }

    /// `execve` of the prepared arguments; returns only on failure, with
    /// its errno. Runs in the child: one system call, no allocation.
    pub(super) fn exec(&self) -> i32 {
        // SAFETY: every pointer is into `self`, built before the clone and
        // unchanged in the child's copy; both arrays are null-terminated.
        // `execve`, not `execvp`: no PATH search and no /bin/sh fallback
        // for files without a recognised format. (rustix 1.x has no safe
        // `execve`, only an `unsafe` one in its `runtime` module.)
        unsafe {
            libc::execve(
                self.path.as_ptr(),
                self.argv_ptrs.as_ptr(),
                self.envp_ptrs.as_ptr(),
            );
        }
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}
