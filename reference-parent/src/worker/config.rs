//! What a worker is started with: [`WorkerConfig`] (command, policy,
//! grants, limits, containment, cancellation) and the supervision constants
//! of DESIGN §17.2–§17.4.

use std::time::Duration;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, Policy};

use crate::cancel::Cancel;
use crate::cgroup::{self, CgroupLimits, ChildCgroup, ChildKind, Containment};
use crate::child_process::rlimits::WorkerLimits;
use crate::child_process::worker_command::WorkerCommand;
use crate::error::{Error, ErrorClass};
use crate::process_host::{Environment, Grants, ProcessAccess, ProcessHostConfig};

/// How long spawn + `initialize` may take by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, after the kill, the parent waits for every holder of the
/// response pipe to be gone before reporting an escaped holder.
pub const PIPE_RELEASE_WAIT: Duration = Duration::from_millis(500);

/// How long `shutdown` (of every driver) lets a worker exit on its own
/// after its input is closed, before it is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// `pids.max` of a worker's cgroup (DESIGN §17.2): the reference worker is
/// one single-threaded process; a worker command given by the operator may
/// start a few helpers, and a fork bomb stops here.
pub const WORKER_PIDS_MAX: u64 = 64;

/// `memory.max` of a worker's cgroup for `policy` (DESIGN §17.2): the same
/// derivation as the address-space limit, `2 × memory_limit_bytes +
/// 256 MiB` (see [`crate::rlimits`]). The VM's allocator stops the Lua heap
/// at `memory_limit_bytes` first; this is the second fence behind it. It
/// never binds a single process before `RLIMIT_AS` would (resident memory
/// is at most the address space), but it binds the *sum* over every process
/// of the worker's cgroup, and the kernel memory and page cache charged to
/// it, which no per-process limit does.
pub fn worker_memory_max(policy: &Policy) -> u64 {
    policy
        .memory_limit_bytes()
        .saturating_mul(2)
        .saturating_add(crate::child_process::rlimits::ADDRESS_SPACE_MARGIN_BYTES)
}

/// Everything needed to start and initialize a worker, for every driver.
///
/// Builder methods are named `with_FIELD`, getters `FIELD` (as for
/// [`PoolOptions`](crate::lifecycle::PoolOptions)).
///
/// ```no_run
/// use quirl_lua_reference_parent::{Policy, WorkerCommand, WorkerConfig};
///
/// // An installed worker binary (`quirl-worker`, or `quirl-lua
/// // --internal-lua-worker-v1`): never `WorkerCommand::current_exe()` in
/// // a host's own binary, which would start the host again.
/// let command = WorkerCommand::new("/usr/local/bin/quirl-worker");
/// let config = WorkerConfig::new(command, Policy::quirl_script_profile())
///     .with_grants(vec!["process.spawn:echo".to_owned()]);
/// assert_eq!(config.grants(), Some(&["process.spawn:echo".to_owned()][..]));
/// ```
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    command: WorkerCommand,
    policy: Policy,
    grants: Option<Vec<String>>,
    process_enabled: bool,
    startup_timeout: Duration,
    cancel: Option<Cancel>,
    process_host: Option<ProcessHostConfig>,
    limits: WorkerLimits,
    containment: Containment,
    command_pids_max: Option<u64>,
    require_landlock: bool,
}

impl WorkerConfig {
    /// Run `command` under `policy`; process access follows
    /// `policy.allow_process()` and no grants are sent.
    pub fn new(command: WorkerCommand, policy: Policy) -> Self {
        Self {
            command,
            process_enabled: policy.allow_process(),
            policy,
            grants: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            cancel: None,
            process_host: None,
            limits: WorkerLimits::for_policy(&policy),
            containment: Containment::Auto,
            command_pids_max: Some(crate::process_host::DEFAULT_COMMAND_PIDS_MAX),
            require_landlock: false,
        }
    }

    /// The worker command.
    pub fn command(&self) -> &WorkerCommand {
        &self.command
    }

    /// The policy sent with `initialize`.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// `pids.max` of each host command's cgroup in the default process-host
    /// configuration (see [`ProcessHostConfig::command_pids_max`]).
    #[must_use]
    pub fn with_command_pids_max(mut self, count: Option<u64>) -> Self {
        self.command_pids_max = count;
        self
    }

    /// `pids.max` of each host command's cgroup.
    pub fn command_pids_max(&self) -> Option<u64> {
        self.command_pids_max
    }

    /// Host commands fail closed where the Landlock execute ruleset cannot
    /// be applied (DESIGN §16.6), in the default process-host configuration
    /// and in one given with [`with_process_host`](Self::with_process_host)
    /// alike. Default off: without Landlock, grants are checked against the
    /// program list (DESIGN §16.2).
    #[must_use]
    pub fn with_require_landlock(mut self, required: bool) -> Self {
        self.require_landlock = required;
        self
    }

    /// Whether host commands require Landlock.
    pub fn require_landlock(&self) -> bool {
        self.require_landlock
    }

    /// How the worker and its host commands are contained (default
    /// [`Containment::Auto`]: a cgroup each when cgroup v2 is writable,
    /// process groups otherwise; DESIGN §17.2–17.3).
    #[must_use]
    pub fn with_containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// The containment this config asks for.
    pub fn containment(&self) -> Containment {
        self.containment
    }

    /// The worker's own cgroup, in cgroup mode.
    pub(crate) fn worker_cgroup(&self) -> Result<Option<ChildCgroup>, Error> {
        let failed = |why: String| {
            Error::new(
                ErrorClass::Spawn,
                ErrorCode::ProcessSpawn,
                "could not contain the Lua worker in a cgroup",
            )
            .with_context(why)
            .with_help("use Containment::ProcessGroup (or Auto) where cgroup v2 is not writable")
        };
        let Some(hierarchy) = cgroup::resolve(self.containment).map_err(failed)? else {
            return Ok(None);
        };
        let limits = CgroupLimits {
            memory_max: Some(worker_memory_max(&self.policy)),
            pids_max: Some(WORKER_PIDS_MAX),
        };
        ChildCgroup::create(hierarchy, ChildKind::Worker, limits)
            .map(Some)
            .map_err(|error| failed(format!("creating the worker's cgroup failed: {error}")))
    }

    /// Resource limits of the worker process (default:
    /// [`WorkerLimits::for_policy`] of this config's policy).
    #[must_use]
    pub fn with_limits(mut self, limits: WorkerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The worker's resource limits.
    pub fn limits(&self) -> &WorkerLimits {
        &self.limits
    }

    /// Capability grants sent with `initialize` (e.g. `process.spawn:echo`).
    #[must_use]
    pub fn with_grants(mut self, grants: Vec<String>) -> Self {
        self.grants = Some(grants);
        self
    }

    /// The grants sent with `initialize` (`None`: none are sent).
    pub fn grants(&self) -> Option<&[String]> {
        self.grants.as_deref()
    }

    /// Whether the parent offers a process host to this worker.
    ///
    /// Host calls are accepted only when this is true *and* the policy
    /// allows processes; any other host call is a protocol violation.
    #[must_use]
    pub fn with_process_enabled(mut self, enabled: bool) -> Self {
        self.process_enabled = enabled;
        self
    }

    /// Whether the parent offers a process host.
    pub fn process_enabled(&self) -> bool {
        self.process_enabled
    }

    /// Deadline for spawning and initializing the worker (and loading its
    /// plugin again after a restart).
    #[must_use]
    pub fn with_startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// The startup deadline.
    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout
    }

    /// Observe this token (e.g. one shared by several workers, or a pool's)
    /// instead of a fresh one.
    #[must_use]
    pub fn with_cancel(mut self, token: Cancel) -> Self {
        self.cancel = Some(token);
        self
    }

    /// The token set with [`with_cancel`](Self::with_cancel), if any
    /// (pools adopt it as their own).
    pub fn cancel(&self) -> Option<&Cancel> {
        self.cancel.as_ref()
    }

    /// Run host calls with this process-host configuration.
    ///
    /// Default: access from the policy and `process_enabled`, the program
    /// grants among [`grants`](Self::grants) (`process.spawn:NAME`), `PATH`
    /// and `HOME` from this process, and this process's working directory.
    #[must_use]
    pub fn with_process_host(mut self, config: ProcessHostConfig) -> Self {
        self.process_host = Some(config);
        self
    }

    /// The process-host configuration set with
    /// [`with_process_host`](Self::with_process_host), if any.
    pub fn process_host(&self) -> Option<&ProcessHostConfig> {
        self.process_host.as_ref()
    }

    /// The process host every driver answers host calls with.
    pub(crate) fn process_host_config(&self) -> Result<ProcessHostConfig, Error> {
        if let Some(config) = &self.process_host {
            let required = config.require_landlock() || self.require_landlock;
            return Ok(config.clone().with_require_landlock(required));
        }
        let invalid = |error: crate::process_host::HostError| {
            let mut wrapped = Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::InvalidArgument,
                "invalid process-host configuration (grants or working directory)",
            )
            .with_context(error.to_string());
            for context in error.context() {
                wrapped = wrapped.with_context(context.clone());
            }
            for help in error.help() {
                wrapped = wrapped.with_help(help.clone());
            }
            wrapped.with_help("grant programs as process.spawn:NAME")
        };
        let grants = Grants::parse(self.grants.iter().flatten()).map_err(invalid)?;
        let access = ProcessAccess {
            allow_process: self.policy.allow_process(),
            process_enabled: self.process_enabled,
        };
        if !(access.allow_process && access.process_enabled) {
            return Ok(ProcessHostConfig::disabled());
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        ProcessHostConfig::new(access, grants, Environment::from_parent(), cwd)
            .map(|config| {
                config
                    .with_containment(self.containment)
                    .with_command_pids_max(self.command_pids_max)
                    .with_require_landlock(self.require_landlock)
            })
            .map_err(invalid)
    }
}
