//! Resource limits the parent puts on a worker before `exec` (DESIGN §18.1).
//!
//! The worker's Lua memory is already capped by its allocator and its time by
//! the parent's deadline; these limits bound what the *process* can do if
//! something below the Lua sandbox goes wrong (a bug in native code, an
//! exploit), and they apply to any worker command, not only the reference
//! worker:
//!
//! | resource | default | why |
//! |---|---|---|
//! | `RLIMIT_AS` | 2 × `memory_limit_bytes` + 256 MiB | the Lua heap (with allocator slack) plus everything outside it: binary and libraries (≈ 8 MiB), the main stack, frame buffers and decoded frames (a 5 MiB frame of tiny JSON values decodes to ≈ 130 MiB of `serde_json::Value`s before the worker can refuse it) |
//! | `RLIMIT_CORE` | 0 | a crashing worker must not write a core file holding guest data |
//! | `RLIMIT_NOFILE` | 32 | the worker needs 0–2 plus a few while the dynamic loader and `/dev/null` are opened at start |
//! | `RLIMIT_FSIZE` | 0 | the worker never writes a regular file (its output is a pipe and `/dev/null`) |
//! | `RLIMIT_NPROC` | 0 | the worker never forks or starts threads; see the caveat below |
//!
//! Limits are set hard and soft (the worker cannot raise them again), never
//! above the parent's own hard limit.
//!
//! Caveat: `RLIMIT_NPROC` counts every process of the worker's *real user*,
//! and it does not bind a process with `CAP_SYS_ADMIN` or `CAP_SYS_RESOURCE`
//! — in particular not root, as in CI. It stops `fork` for unprivileged
//! workers only; the reference worker's seccomp filter is what denies `fork`
//! (and `clone`, `execve`) everywhere.
//!
//! What this module is not: the seccomp filter (the worker installs that
//! itself, after `initialize`: `quirl_lua_reference_worker::lockdown`).

use quirl_lua_protocol::records::Policy;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Address space allowed above twice the policy's memory limit.
pub const ADDRESS_SPACE_MARGIN_BYTES: u64 = 256 << 20;

/// Descriptors a worker may have open at once.
pub const OPEN_FILES_MAX: u64 = 32;

/// The resource limits of one worker process; `None` leaves a resource as
/// the parent has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerLimits {
    address_space: Option<u64>,
    core: Option<u64>,
    open_files: Option<u64>,
    file_size: Option<u64>,
    processes: Option<u64>,
}

impl WorkerLimits {
    /// The defaults of the module table for a worker under `policy`.
    pub fn for_policy(policy: &Policy) -> Self {
        Self {
            address_space: Some(
                policy
                    .memory_limit_bytes()
                    .saturating_mul(2)
                    .saturating_add(ADDRESS_SPACE_MARGIN_BYTES),
            ),
            core: Some(0),
            open_files: Some(OPEN_FILES_MAX),
            file_size: Some(0),
            processes: Some(0),
        }
    }

    /// No limits at all.
    pub(crate) const NONE: Self = Self {
        address_space: None,
        core: None,
        open_files: None,
        file_size: None,
        processes: None,
    };

    /// No limits at all (what `quirl-lua --no-lockdown` uses for debugging).
    pub fn unlimited() -> Self {
        Self::NONE
    }

    /// Set or clear the address-space limit (bytes).
    #[must_use]
    pub fn address_space(mut self, bytes: Option<u64>) -> Self {
        self.address_space = bytes;
        self
    }

    /// Set or clear the core-file size limit (bytes).
    #[must_use]
    pub fn core(mut self, bytes: Option<u64>) -> Self {
        self.core = bytes;
        self
    }

    /// Set or clear the open-descriptor limit.
    #[must_use]
    pub fn open_files(mut self, count: Option<u64>) -> Self {
        self.open_files = count;
        self
    }

    /// Set or clear the file-size limit (bytes).
    #[must_use]
    pub fn file_size(mut self, bytes: Option<u64>) -> Self {
        self.file_size = bytes;
        self
    }

    /// Set or clear the process limit (per real user; see the module docs).
    /// A worker that starts threads or processes needs it raised or cleared.
    #[must_use]
    pub fn processes(mut self, count: Option<u64>) -> Self {
        self.processes = count;
        self
    }

    /// The limits in the order they are applied, as `(resource, value)`.
    fn entries(&self) -> [(Resource, Option<u64>); 5] {
        [
            (Resource::As, self.address_space),
            (Resource::Core, self.core),
            (Resource::Nofile, self.open_files),
            (Resource::Fsize, self.file_size),
            (Resource::Nproc, self.processes),
        ]
    }

    /// The address-space limit, if any (bytes).
    pub fn address_space_bytes(&self) -> Option<u64> {
        self.address_space
    }

    /// Apply the limits to the calling process. Runs in the new child
    /// (`fork`ed or vfork-style, DESIGN §17.2) before `exec`: only the raw `prlimit64` system call (rustix's
    /// `getrlimit`/`setrlimit`), no allocation, no locks.
    pub(crate) fn apply_in_child(&self) -> std::io::Result<()> {
        for (resource, value) in self.entries() {
            let Some(value) = value else { continue };
            // Never above the inherited hard limit (raising it needs
            // privileges and is not what a limit is for); `None` is
            // "unlimited".
            let hard = getrlimit(resource).maximum;
            let value = hard.map_or(value, |hard| value.min(hard));
            setrlimit(
                resource,
                Rlimit {
                    current: Some(value),
                    maximum: Some(value),
                },
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use quirl_lua_protocol::records::PolicySettings;

    #[test]
    fn defaults_follow_the_policy_memory() {
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 1_000,
            wall_time_ms: 100,
        })
        .unwrap();
        let limits = WorkerLimits::for_policy(&policy);
        assert_eq!(limits.address_space_bytes(), Some((64 << 20) + (256 << 20)));
        assert_eq!(limits.core, Some(0));
        assert_eq!(limits.open_files, Some(OPEN_FILES_MAX));
        assert_eq!(limits.file_size, Some(0));
        assert_eq!(limits.processes, Some(0));
        assert!(
            WorkerLimits::unlimited()
                .entries()
                .iter()
                .all(|(_, v)| v.is_none())
        );
    }

    #[test]
    fn builders_override_single_limits() {
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 1 << 20,
            instruction_limit: 1_000,
            wall_time_ms: 100,
        })
        .unwrap();
        let limits = WorkerLimits::for_policy(&policy)
            .processes(None)
            .open_files(Some(8));
        assert_eq!(limits.processes, None);
        assert_eq!(limits.open_files, Some(8));
        assert_eq!(limits.core, Some(0));
    }
}
