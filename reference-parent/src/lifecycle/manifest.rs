//! What a plugin host is started from: [`PluginManifest`] (one plugin:
//! name, source file, policy, grants, declared environment, and its
//! [`PoolOptions`]).
//!
//! Plain data with builder methods named `with_FIELD` and getters named
//! `FIELD`; checked when the host starts, a bad value is an
//! [`ErrorClass::InvalidInput`] error before any process is spawned.

use std::path::{Path, PathBuf};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::limits::SOURCE_BYTES_MAX;
use quirl_lua_protocol::records::{ErrorCode, Policy};

use crate::child_process::worker_command::WorkerCommand;
use crate::error::{Error, ErrorClass};
use crate::process_host::{Environment, Grants, ProcessAccess, ProcessHostConfig};
use crate::supervision::pool::PoolOptions;
use crate::supervision::pool::options::invalid;
use crate::worker::WorkerConfig;

/// Longest plugin name, in bytes.
pub const PLUGIN_NAME_BYTES_MAX: usize = 128;

/// One plugin: where its source is, how its workers run, and its pool.
#[derive(Debug, Clone)]
pub struct PluginManifest {
    name: String,
    source: PathBuf,
    policy: Policy,
    grants: Vec<String>,
    environment: Vec<(String, String)>,
    working_dir: Option<PathBuf>,
    worker: Option<WorkerCommand>,
    worker_config: Option<WorkerConfig>,
    options: PoolOptions,
}

impl PluginManifest {
    /// A plugin named `name` loaded from the file `source`, with
    /// [`Policy::quirl_script_profile`], no grants, no declared environment, the default
    /// worker command (this executable in worker mode) and default
    /// [`PoolOptions`].
    pub fn new(name: impl Into<String>, source: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            source: source.into(),
            policy: Policy::quirl_script_profile(),
            grants: Vec::new(),
            environment: Vec::new(),
            working_dir: None,
            worker: None,
            worker_config: None,
            options: PoolOptions::default(),
        }
    }

    /// The policy every worker of the plugin is initialized with.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Add a capability grant (e.g. `process.spawn:git`).
    #[must_use]
    pub fn with_grant(mut self, grant: impl Into<String>) -> Self {
        self.grants.push(grant.into());
        self
    }

    /// Declare an environment entry for the processes the plugin runs
    /// through `quirl.process.run`, on top of `PATH` and the command's own
    /// `HOME` and `TMPDIR` (DESIGN §16.5).
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.environment.push((name.into(), value.into()));
        self
    }

    /// Working directory of the processes the plugin runs (default: this
    /// process's working directory when the host starts).
    #[must_use]
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// The worker command (default: this executable in worker mode, which
    /// is right only where this executable *is* a worker, as `quirl-lua`
    /// is: a host should name its worker binary, see
    /// [`WorkerCommand`]).
    #[must_use]
    pub fn with_worker(mut self, command: WorkerCommand) -> Self {
        self.worker = Some(command);
        self
    }

    /// Start workers with exactly this configuration (command, policy,
    /// grants, process host, cancellation token) instead of one built from
    /// the manifest's policy, grants, environment, working directory and
    /// worker command, which are then ignored.
    #[must_use]
    pub fn with_worker_config(mut self, config: WorkerConfig) -> Self {
        self.worker_config = Some(config);
        self
    }

    /// Pool size, restart budget, queue and spares.
    #[must_use]
    pub fn with_pool(mut self, options: PoolOptions) -> Self {
        self.options = options;
        self
    }

    /// Number of workers (shorthand for [`PoolOptions::with_size`]).
    #[must_use]
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.options = self.options.with_size(size);
        self
    }

    /// Restart budget (shorthand for [`PoolOptions::with_max_restarts`]).
    #[must_use]
    pub fn with_max_restarts(mut self, max_restarts: u32) -> Self {
        self.options = self.options.with_max_restarts(max_restarts);
        self
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The grants.
    pub fn grants(&self) -> &[String] {
        &self.grants
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's source file.
    pub fn source_path(&self) -> &Path {
        &self.source
    }

    /// The pool options.
    pub fn pool(&self) -> PoolOptions {
        self.options
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        validate_name(&self.name)?;
        self.options.validate()
    }

    /// Read and check the plugin's source file: at most
    /// [`SOURCE_BYTES_MAX`] bytes of UTF-8.
    pub(crate) fn read_source(&self) -> Result<String, Error> {
        let path = &self.source;
        let unreadable = |error: std::io::Error| {
            Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::ScriptRead,
                "cannot read the plugin source",
            )
            .with_context(format!(
                "plugin `{}`: {}: {error}",
                self.name,
                path.display()
            ))
        };
        let metadata = std::fs::metadata(path).map_err(unreadable)?;
        if metadata.len() > SOURCE_BYTES_MAX as u64 {
            return Err(Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::ResourceLimit,
                "the plugin source is too large",
            )
            .with_context(format!(
                "plugin `{}`: {} is {} bytes; the limit is {SOURCE_BYTES_MAX}",
                self.name,
                path.display(),
                metadata.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(unreadable)?;
        if bytes.len() > SOURCE_BYTES_MAX {
            return Err(Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::ResourceLimit,
                "the plugin source is too large",
            )
            .with_context(format!(
                "plugin `{}`: {} grew past {SOURCE_BYTES_MAX} bytes while read",
                self.name,
                path.display()
            )));
        }
        String::from_utf8(bytes).map_err(|error| {
            Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::ScriptRead,
                "the plugin source is not UTF-8",
            )
            .with_context(format!(
                "plugin `{}`: {}: {error}",
                self.name,
                path.display()
            ))
        })
    }

    /// The worker configuration every member of this plugin's pool uses.
    pub(crate) fn worker_config(&self) -> Result<WorkerConfig, Error> {
        if let Some(config) = &self.worker_config {
            return Ok(config.clone());
        }
        let command = match &self.worker {
            Some(command) => command.clone(),
            None => WorkerCommand::current_exe().map_err(|error| {
                Error::new(
                    ErrorClass::Spawn,
                    ErrorCode::ProcessSpawn,
                    "cannot find this executable to run as the worker",
                )
                .with_context(error.to_string())
            })?,
        };
        let host = self.process_host_config()?;
        let mut config = WorkerConfig::new(command, self.policy).with_process_host(host);
        if !self.grants.is_empty() {
            config = config.with_grants(self.grants.clone());
        }
        Ok(config)
    }
}

impl PluginManifest {
    /// Host calls: the policy decides access; the grants, `PATH`, `HOME`
    /// and the declared entries, and the working directory, the rest.
    fn process_host_config(&self) -> Result<ProcessHostConfig, Error> {
        let bad_grant = |error: crate::process_host::HostError| {
            invalid(format!("plugin `{}`: {error}", self.name))
        };
        let grants = Grants::parse(self.grants.iter()).map_err(bad_grant)?;
        let mut environment = Environment::from_parent();
        for (name, value) in &self.environment {
            environment.set(name, value.as_str()).map_err(bad_grant)?;
        }
        let cwd = match &self.working_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| "/".into()),
        };
        let access = ProcessAccess {
            allow_process: self.policy.allow_process(),
            process_enabled: self.policy.allow_process(),
        };
        ProcessHostConfig::new(access, grants, environment, cwd).map_err(bad_grant)
    }
}

fn validate_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > PLUGIN_NAME_BYTES_MAX {
        return Err(invalid(format!(
            "a plugin name has 1..={PLUGIN_NAME_BYTES_MAX} bytes; this one has {}",
            name.len()
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("a plugin name must not contain control characters"));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_are_bounded_and_printable() {
        assert!(validate_name("git-status").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("a\nb").is_err());
        assert!(validate_name(&"x".repeat(PLUGIN_NAME_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn a_missing_source_is_a_script_read_error() {
        let manifest = PluginManifest::new("p", "/nonexistent/quirl-lua-plugin.lua");
        let error = manifest.read_source().unwrap_err();
        assert_eq!(error.code(), ErrorCode::ScriptRead);
        assert_eq!(error.class(), ErrorClass::InvalidInput);
    }

    #[test]
    fn declared_environment_reaches_the_process_host() {
        let manifest = PluginManifest::new("p", "/dev/null")
            .with_worker(WorkerCommand::new("/bin/true"))
            .with_grant("process.spawn:echo")
            .with_env("PLUGIN_MODE", "test");
        assert!(manifest.worker_config().is_ok());
        let host = manifest.process_host_config().unwrap();
        let names: Vec<&str> = host.environment().iter().map(|(name, _)| name).collect();
        assert!(names.contains(&"PLUGIN_MODE"), "{names:?}");
        assert!(
            names
                .iter()
                .all(|name| ["PATH", "HOME", "PLUGIN_MODE"].contains(name))
        );
        assert!(host.grants().allows("echo"));
        assert!(!host.grants().allows("sh"));
        let bad = PluginManifest::new("p", "/dev/null")
            .with_worker(WorkerCommand::new("/bin/true"))
            .with_env("1BAD", "x");
        assert_eq!(
            bad.worker_config().unwrap_err().class(),
            ErrorClass::InvalidInput
        );
    }
}
