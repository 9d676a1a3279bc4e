//! Deny-by-default grants: which programs, which environment, which
//! working directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;

use super::exec_guard::exec_guard_support;
use super::exec_ruleset::RulesetCache;
use super::host_error::HostError;
use super::private_dirs::PrivateDirsPool;
use super::wrappers::{is_programming_environment, runs_arguments_as_command};
use crate::cgroup::Containment;

/// Default `pids.max` of a host command's cgroup (DESIGN §17.2): enough for a
/// build tool's process tree, low enough to stop a fork bomb.
pub const DEFAULT_COMMAND_PIDS_MAX: u64 = 256;

/// The grant that allows every program (Quirl's unscoped capability).
pub const PROCESS_SPAWN_GRANT: &str = "process.spawn";
/// Prefix of a grant for one program: `process.spawn:NAME`.
pub const PROCESS_SPAWN_GRANT_PREFIX: &str = "process.spawn:";
/// Characters allowed in a granted program NAME besides ASCII letters and
/// digits (Quirl's scoped-grant alphabet without the space).
const NAME_PUNCTUATION: &str = "-_./:=,@%+";

/// Which scoped grants are refused (DESIGN §16.2): it depends on whether host
/// commands granted by name run under the exec guard (DESIGN §16.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantRule {
    /// Every command granted by name runs under the exec guard, so the
    /// granted program is the one program its tree executes: only
    /// programming environments, launchers and command services are
    /// refused ([`super::PROGRAMMING_ENVIRONMENTS`]).
    ExecGuard,
    /// No exec guard: every program that runs its arguments as a command
    /// is refused ([`super::COMMAND_RUNNING_PROGRAMS`]).
    ProgramList,
}

impl GrantRule {
    /// [`GrantRule::ExecGuard`] where this kernel offers the exec guard
    /// (seccomp user notification), else [`GrantRule::ProgramList`].
    pub fn for_this_kernel() -> Self {
        if exec_guard_support().is_ok() {
            Self::ExecGuard
        } else {
            Self::ProgramList
        }
    }

    /// Whether a scoped grant of `name` is refused under this rule (by its
    /// spelling; [`ProcessHostConfig::new`] also judges the file it
    /// resolves to).
    pub fn refuses(self, name: &str) -> bool {
        match self {
            Self::ExecGuard => is_programming_environment(name),
            Self::ProgramList => runs_arguments_as_command(name),
        }
    }
}

/// The program allowlist parsed from grant strings.
///
/// The default value grants nothing, under [`GrantRule::for_this_kernel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    any_program: bool,
    names: std::collections::BTreeSet<String>,
    rule: GrantRule,
}

impl Default for Grants {
    fn default() -> Self {
        Self::none_under(GrantRule::for_this_kernel())
    }
}

impl Grants {
    /// No programs.
    pub fn none() -> Self {
        Self::default()
    }

    /// No programs; later scoped grants are checked under `rule`.
    pub fn none_under(rule: GrantRule) -> Self {
        Self {
            any_program: false,
            names: std::collections::BTreeSet::new(),
            rule,
        }
    }

    /// The rule scoped grants were checked under.
    pub fn rule(&self) -> GrantRule {
        self.rule
    }

    /// Whether every program is granted (`process.spawn`).
    pub fn any_program(&self) -> bool {
        self.any_program
    }

    /// Parse the grant strings a parent passes at initialize, under
    /// [`GrantRule::for_this_kernel`].
    ///
    /// `process.spawn` grants every program; `process.spawn:NAME` grants one.
    /// Any other string starting with `process.` is rejected (fail closed on
    /// a misspelt grant); strings outside the `process.` namespace are
    /// capabilities of the worker and are ignored here. A NAME the rule
    /// refuses (with the exec guard: `sh`, `env`, `python`, `vim.basic`, …;
    /// without: also `git`, `find`, `setsid`, …; see [`GrantRule`]) is
    /// refused unless `process.spawn` is granted too (DESIGN §16.2).
    pub fn parse<I, S>(grants: I) -> Result<Self, HostError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::parse_under(GrantRule::for_this_kernel(), grants)
    }

    /// [`Grants::parse`] under an explicit rule.
    pub fn parse_under<I, S>(rule: GrantRule, grants: I) -> Result<Self, HostError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let grants: Vec<S> = grants.into_iter().collect();
        let mut parsed = Self::none_under(rule);
        parsed.any_program = grants
            .iter()
            .any(|grant| grant.as_ref() == PROCESS_SPAWN_GRANT);
        for grant in &grants {
            let grant = grant.as_ref();
            if grant == PROCESS_SPAWN_GRANT {
                parsed.any_program = true;
            } else if let Some(name) = grant.strip_prefix(PROCESS_SPAWN_GRANT_PREFIX) {
                validate_program_name(name).map_err(|error| {
                    error.with_context(format!("grant `{}`", truncate_for_display(grant)))
                })?;
                if !parsed.any_program {
                    refuse_command_runner(rule, name)?;
                }
                parsed.names.insert(name.to_owned());
            } else if grant.starts_with("process.") {
                return Err(HostError::new(
                    ErrorCode::InvalidArgument,
                    format!("unknown process grant `{}`", truncate_for_display(grant)),
                )
                .with_help("Use `process.spawn:NAME` for one program or `process.spawn` for all"));
            }
        }
        Ok(parsed)
    }

    /// Grant one program by NAME (a bare name or an absolute path).
    ///
    /// A program that runs its arguments as a command is refused unless
    /// every program is granted already ([`Self::allow_any_program`]).
    pub fn allow_program(mut self, name: &str) -> Result<Self, HostError> {
        validate_program_name(name)?;
        if !self.any_program {
            refuse_command_runner(self.rule, name)?;
        }
        self.names.insert(name.to_owned());
        Ok(self)
    }

    /// Grant every program (the unscoped `process.spawn`).
    pub fn allow_any_program(mut self) -> Self {
        self.any_program = true;
        self
    }

    /// Whether the program word of a command is granted.
    pub fn allows(&self, program: &str) -> bool {
        self.any_program || self.names.contains(program)
    }

    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        !self.any_program && self.names.is_empty()
    }
}

/// DESIGN §16.2: a grant of a program the rule refuses would grant every
/// program (or, under the exec guard, arbitrary code); refuse it with that
/// explanation.
pub(crate) fn refuse_command_runner(rule: GrantRule, name: &str) -> Result<(), HostError> {
    if !rule.refuses(name) {
        return Ok(());
    }
    let shown = truncate_for_display(name);
    let (why, list) = match rule {
        GrantRule::ExecGuard => (
            "is a programming environment, a launcher or a command service",
            "refused even under the exec guard (DESIGN §16.2)",
        ),
        GrantRule::ProgramList => (
            "runs its arguments as a command",
            "on the list of programs that start other programs; the exec guard is not in use (DESIGN §16.2)",
        ),
    };
    Err(HostError::new(
        ErrorCode::InvalidArgument,
        format!(
            "grant `{PROCESS_SPAWN_GRANT_PREFIX}{shown}` would grant every program: `{shown}` {why}"
        ),
    )
    .with_context(format!("`{shown}` is {list}"))
    .with_context(format!("exec guard: {}", super::exec_guard::exec_guard_summary()))
    .with_context(format!("landlock: {}", super::landlock_support().summary()))
    .with_help(format!(
        "Grant the programs it would run by name instead, or grant every program on purpose with `{PROCESS_SPAWN_GRANT}`"
    )))
}

fn validate_program_name(name: &str) -> Result<(), HostError> {
    let bad = |reason: &str| {
        HostError::new(
            ErrorCode::InvalidArgument,
            format!("invalid program name in grant: {reason}"),
        )
        .with_help(
            "A granted NAME is a bare program name (`echo`) or a normalized absolute path \
             (`/usr/bin/echo`) of ASCII letters, digits and `-_./:=,@%+`",
        )
    };
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || NAME_PUNCTUATION.contains(c))
    {
        return Err(bad("character outside the allowed alphabet"));
    }
    if name.contains('/') {
        let path = Path::new(name);
        let normalized = path.is_absolute()
            && !name.ends_with('/')
            && !name.contains("//")
            && path
                .components()
                .all(|part| matches!(part, Component::RootDir | Component::Normal(_)));
        if !normalized {
            return Err(bad("a path must be absolute and normalized"));
        }
    } else if name == "." || name == ".." {
        return Err(bad("`.` and `..` are not programs"));
    }
    Ok(())
}

/// The environment a child starts with: these entries, plus `HOME` and
/// `TMPDIR` pointing into the command's private directory unless declared
/// here (DESIGN §16.5).
///
/// `PATH` also decides where bare program names are looked up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    entries: BTreeMap<String, OsString>,
}

impl Environment {
    /// No entries at all (bare program names then cannot be resolved).
    pub fn empty() -> Self {
        Self::default()
    }

    /// `PATH` copied from this process's environment, when it is set. This
    /// is the documented default base; `HOME` is not copied: a command gets
    /// a private, empty one unless one is declared (DESIGN §16.5).
    pub fn from_parent() -> Self {
        let mut environment = Self::empty();
        for name in ["PATH"] {
            if let Some(value) = std::env::var_os(name)
                && !value.as_bytes().contains(&0)
            {
                environment.entries.insert(name.to_owned(), value);
            }
        }
        environment
    }

    /// Declare (or replace) one entry. Names are `[A-Za-z_][A-Za-z0-9_]*`;
    /// values may not contain NUL.
    pub fn set(&mut self, name: &str, value: impl Into<OsString>) -> Result<(), HostError> {
        let value = value.into();
        let mut chars = name.chars();
        let valid_name = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(HostError::new(
                ErrorCode::InvalidArgument,
                format!("invalid environment name `{}`", truncate_for_display(name)),
            )
            .with_help("Environment names use ASCII letters, digits and underscores and do not start with a digit"));
        }
        if value.as_bytes().contains(&0) {
            return Err(HostError::new(
                ErrorCode::InvalidArgument,
                format!("environment value of `{name}` contains a NUL byte"),
            )
            .with_help("Operating-system environment values cannot contain NUL bytes"));
        }
        self.entries.insert(name.to_owned(), value);
        Ok(())
    }

    /// Builder form of [`Environment::set`].
    pub fn with(mut self, name: &str, value: impl Into<OsString>) -> Result<Self, HostError> {
        self.set(name, value)?;
        Ok(self)
    }

    /// Remove one entry, returning whether it was present.
    pub fn remove(&mut self, name: &str) -> bool {
        self.entries.remove(name).is_some()
    }

    /// The entries, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OsStr)> {
        self.entries
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_os_str()))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&OsStr> {
        self.entries.get(name).map(OsString::as_os_str)
    }
}

/// Whether the parent's policy and the worker's initialize allow process
/// access at all. Both must be true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessAccess {
    /// `policy.allow_process` as sent at initialize.
    pub allow_process: bool,
    /// `process_enabled` as sent at initialize.
    pub process_enabled: bool,
}

/// Everything the host needs to decide and run a host call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessHostConfig {
    access: ProcessAccess,
    grants: Grants,
    environment: Environment,
    cwd: PathBuf,
    containment: Containment,
    command_pids_max: Option<u64>,
    require_landlock: bool,
    /// Directories commands may write beneath besides their working
    /// directory and private directory (DESIGN §16.8).
    writable: Vec<PathBuf>,
    /// The execute rulesets of the programs run so far (DESIGN §16.6).
    rulesets: RulesetCache,
    /// Emptied private directories of earlier commands (DESIGN §16.5).
    private_dirs: PrivateDirsPool,
}

impl ProcessHostConfig {
    /// A host that denies every call.
    pub fn disabled() -> Self {
        Self {
            access: ProcessAccess::default(),
            grants: Grants::none(),
            environment: Environment::empty(),
            cwd: PathBuf::from("/"),
            containment: Containment::Auto,
            command_pids_max: Some(DEFAULT_COMMAND_PIDS_MAX),
            require_landlock: false,
            writable: Vec::new(),
            rulesets: RulesetCache::default(),
            private_dirs: PrivateDirsPool::default(),
        }
    }

    /// Build a configuration. `cwd` must be an absolute path to an existing
    /// directory; it is checked now and again when each child starts.
    pub fn new(
        access: ProcessAccess,
        grants: Grants,
        environment: Environment,
        cwd: impl Into<PathBuf>,
    ) -> Result<Self, HostError> {
        let cwd = cwd.into();
        if !cwd.is_absolute() {
            return Err(HostError::new(
                ErrorCode::InvalidArgument,
                "working directory must be an absolute path",
            )
            .with_context(format!("observed `{}`", cwd.display())));
        }
        if cwd.as_os_str().as_bytes().contains(&0) {
            return Err(HostError::new(
                ErrorCode::InvalidArgument,
                "working directory contains a NUL byte",
            ));
        }
        match std::fs::metadata(&cwd) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                return Err(HostError::new(
                    ErrorCode::InvalidArgument,
                    "working directory is not a directory",
                )
                .with_context(format!("path `{}`", cwd.display())));
            }
            Err(error) => {
                return Err(HostError::new(
                    ErrorCode::InvalidArgument,
                    "working directory is not accessible",
                )
                .with_context(format!("path `{}`: {error}", cwd.display())));
            }
        }
        let config = Self {
            access,
            grants,
            environment,
            cwd,
            containment: Containment::Auto,
            command_pids_max: Some(DEFAULT_COMMAND_PIDS_MAX),
            require_landlock: false,
            writable: Vec::new(),
            rulesets: RulesetCache::default(),
            private_dirs: PrivateDirsPool::default(),
        };
        config.judge_granted_programs()?;
        Ok(config)
    }

    /// DESIGN §16.2 "Identity": every program granted by name is resolved
    /// to the file it is (on the granted `PATH`, as a command would find
    /// it) and refused when that file, or the interpreter of its `#!`
    /// chain, is a programming environment under another name. A granted
    /// name that is not installed is not an error here (the command then
    /// fails with `process_spawn`); it is judged when a command finds it.
    fn judge_granted_programs(&self) -> Result<(), HostError> {
        if self.grants.any_program() {
            return Ok(());
        }
        let search = self.search_dirs();
        for name in &self.grants.names {
            let Ok(path) = self.resolve(name) else {
                continue;
            };
            if let Some(why) = super::program_identity::refusal(name, &path, &search) {
                let shown = truncate_for_display(name);
                return Err(HostError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "grant `{PROCESS_SPAWN_GRANT_PREFIX}{shown}` would grant every program: `{shown}` is a programming environment under another name"
                    ),
                )
                .with_context(why)
                .with_context(format!("`{shown}` resolves to `{}`", path.display()))
                .with_help(format!(
                    "Grant the programs it would run by name instead, or grant every program on purpose with `{PROCESS_SPAWN_GRANT}`"
                )));
            }
        }
        Ok(())
    }

    /// How each command is contained (default [`Containment::Auto`]: a
    /// cgroup per command when cgroup v2 is writable; DESIGN §17.2–17.3).
    #[must_use]
    pub fn with_containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// How many processes each command's tree may hold at once (`pids.max`
    /// of its cgroup; default [`DEFAULT_COMMAND_PIDS_MAX`]; `None`: no
    /// limit). Enforced or refused, never ignored (DESIGN §16.7): through
    /// the `pids` controller of the command's cgroup v2 where it is
    /// enabled, else of a cgroup v1 `pids` hierarchy; where neither can be
    /// written every command fails with `process_spawn` and says why (see
    /// `quirl-lua --version --verbose`).
    #[must_use]
    pub fn with_command_pids_max(mut self, count: Option<u64>) -> Self {
        self.command_pids_max = count;
        self
    }

    /// Fail every command closed where the Landlock execute ruleset cannot
    /// be applied, instead of falling back to the program list (DESIGN §16.6;
    /// the CLI's `--require-landlock`). Default off.
    #[must_use]
    pub fn with_require_landlock(mut self, required: bool) -> Self {
        self.require_landlock = required;
        self
    }

    /// Whether [`Self::with_require_landlock`] is set.
    pub fn require_landlock(&self) -> bool {
        self.require_landlock
    }

    /// Let commands also write beneath `dir`, an absolute path to an
    /// existing directory (DESIGN §16.8; by default a command writes only
    /// beneath its working directory and its private directory). Bare
    /// program names are never looked up beneath a writable directory.
    pub fn allow_writes_beneath(mut self, dir: impl Into<PathBuf>) -> Result<Self, HostError> {
        let dir = dir.into();
        let usable = dir.is_absolute() && std::fs::metadata(&dir).is_ok_and(|meta| meta.is_dir());
        if !usable {
            return Err(HostError::new(
                ErrorCode::InvalidArgument,
                "a writable directory must be an absolute path to an existing directory",
            )
            .with_context(format!("observed `{}`", dir.display())));
        }
        self.writable.push(dir);
        Ok(self)
    }

    /// The directories commands may write beneath, besides each command's
    /// private directory: the working directory (unless it is `/`, which
    /// would make the whole filesystem writable; DESIGN §16.8) and those
    /// added with [`Self::allow_writes_beneath`].
    pub fn writable_roots(&self) -> Vec<&Path> {
        let mut roots: Vec<&Path> = Vec::new();
        if self.cwd != Path::new("/") {
            roots.push(&self.cwd);
        }
        roots.extend(self.writable.iter().map(PathBuf::as_path));
        roots
    }

    /// Whether `path` lies beneath a directory commands may write, as
    /// written or once its links are resolved (DESIGN §16.8).
    pub(crate) fn is_writable_by_commands(&self, path: &Path) -> bool {
        let roots = self.writable_roots();
        if roots.is_empty() {
            return false;
        }
        let canonical_roots: Vec<PathBuf> = roots
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .collect();
        let canonical = std::fs::canonicalize(path).ok();
        let beneath = |candidate: &Path| {
            roots.iter().any(|root| candidate.starts_with(root))
                || canonical_roots
                    .iter()
                    .any(|root| candidate.starts_with(root))
        };
        beneath(path) || canonical.as_deref().is_some_and(beneath)
    }

    /// The absolute directories of the granted `PATH`.
    pub(crate) fn search_dirs(&self) -> Vec<PathBuf> {
        self.environment
            .get("PATH")
            .map(|path| {
                std::env::split_paths(path)
                    .filter(|dir| dir.is_absolute())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The execute rulesets built for this configuration's commands.
    pub(crate) fn rulesets(&self) -> &RulesetCache {
        &self.rulesets
    }

    /// The private directories kept for this configuration's commands.
    pub(crate) fn private_dirs(&self) -> &PrivateDirsPool {
        &self.private_dirs
    }

    /// The containment asked for.
    pub fn containment(&self) -> Containment {
        self.containment
    }

    /// The `pids.max` of each command's cgroup.
    pub fn command_pids_max(&self) -> Option<u64> {
        self.command_pids_max
    }

    /// Whether calls can be granted at all.
    pub fn access(&self) -> ProcessAccess {
        self.access
    }

    /// The program allowlist.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The complete child environment.
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// The child working directory.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Check access and the grant for `program` (the first word of a parsed
    /// command) and resolve it to the path that will be executed.
    pub(crate) fn authorize(&self, program: &str) -> Result<PathBuf, HostError> {
        if !(self.access.allow_process && self.access.process_enabled) {
            return Err(access_denied(self.access));
        }
        if !self.grants.allows(program) {
            return Err(HostError::new(
                ErrorCode::Validation,
                format!(
                    "capability denied: {PROCESS_SPAWN_GRANT_PREFIX}{}",
                    truncate_for_display(program)
                ),
            )
            .with_help(format!(
                "Grant the program with `{PROCESS_SPAWN_GRANT_PREFIX}{}`",
                truncate_for_display(program)
            )));
        }
        let path = self.resolve(program)?;
        // A granted path a command may write could be replaced by one
        // command for the next (DESIGN §16.8). (Bare names never resolve
        // there.)
        if !self.grants.any_program() && self.is_writable_by_commands(&path) {
            return Err(HostError::new(
                ErrorCode::Validation,
                format!(
                    "capability denied: `{}` lies beneath a directory host commands may write",
                    truncate_for_display(program)
                ),
            )
            .with_context(format!("resolved to `{}`", path.display()))
            .with_help(
                "Install the program outside the working directory and the writable directories",
            ));
        }
        Ok(path)
    }

    pub(crate) fn check_access(&self) -> Result<(), HostError> {
        if self.access.allow_process && self.access.process_enabled {
            Ok(())
        } else {
            Err(access_denied(self.access))
        }
    }

    fn resolve(&self, program: &str) -> Result<PathBuf, HostError> {
        if program.contains('/') {
            // Absolute paths run as written; relative ones (only reachable
            // through the unscoped grant) from the granted working directory.
            return Ok(self.cwd.join(program));
        }
        let not_found = || {
            HostError::new(
                ErrorCode::ProcessSpawn,
                format!(
                    "program `{}` was not found on the granted PATH",
                    truncate_for_display(program)
                ),
            )
            .with_help(
                "Install the program, grant a PATH that contains it, or grant its absolute path",
            )
        };
        let Some(path) = self.environment.get("PATH") else {
            return Err(not_found().with_context("the granted environment has no PATH"));
        };
        let mut skipped = Vec::new();
        for directory in std::env::split_paths(path) {
            // Empty and relative entries would search the working directory.
            if !directory.is_absolute() {
                continue;
            }
            // A command could plant a program there for the next one
            // (DESIGN §16.8).
            if self.is_writable_by_commands(&directory) {
                skipped.push(directory);
                continue;
            }
            let candidate = directory.join(program);
            if let Ok(metadata) = std::fs::metadata(&candidate)
                && metadata.is_file()
                && metadata.permissions().mode() & 0o111 != 0
            {
                return Ok(candidate);
            }
        }
        let mut error = not_found();
        for directory in skipped.iter().take(4) {
            error = error.with_context(format!(
                "skipped `{}`: host commands may write beneath it",
                directory.display()
            ));
        }
        Err(error)
    }
}

fn access_denied(access: ProcessAccess) -> HostError {
    HostError::new(
        ErrorCode::Validation,
        "capability denied: process access is disabled",
    )
    .with_context(format!(
        "policy allow_process: {}; initialize process_enabled: {}",
        access.allow_process, access.process_enabled
    ))
    .with_help(
        "Enable process access in the policy and at initialize, and grant `process.spawn:NAME`",
    )
}

/// Keep user-supplied text in messages short.
pub(crate) fn truncate_for_display(text: &str) -> String {
    const LIMIT: usize = 256;
    if text.len() <= LIMIT {
        return text.to_owned();
    }
    let mut end = LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn enabled() -> ProcessAccess {
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        }
    }

    #[test]
    fn a_grant_of_a_command_runner_is_refused_unless_every_program_is_granted() {
        // DESIGN §16.2: `setsid -f sleep 77` would run `sleep`.
        for grant in [
            "process.spawn:setsid",
            "process.spawn:/usr/bin/env",
            "process.spawn:sh",
        ] {
            let error = Grants::parse([grant]).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument, "{grant}");
            assert!(
                error.message().contains("would grant every program"),
                "{grant}: {}",
                error.message()
            );
            assert!(
                error.help()[0].contains("`process.spawn`"),
                "{:?}",
                error.help()
            );
        }
        assert!(Grants::none().allow_program("nohup").is_err());
        // With every program granted on purpose, naming one is harmless.
        let grants = Grants::parse(["process.spawn:setsid", "process.spawn"]).unwrap();
        assert!(grants.allows("setsid"));
        assert!(
            Grants::none()
                .allow_any_program()
                .allow_program("setsid")
                .is_ok()
        );
        assert!(Grants::parse(["process.spawn:echo"]).is_ok());
    }

    #[test]
    fn parses_scoped_and_unscoped_grants_and_ignores_worker_capabilities() {
        let grants = Grants::parse([
            "process.spawn:echo",
            "prompt.register",
            "process.spawn:/bin/cat",
        ])
        .unwrap();
        assert!(grants.allows("echo"));
        assert!(grants.allows("/bin/cat"));
        assert!(!grants.allows("cat"));
        assert!(!grants.allows("/bin/echo"));
        assert!(Grants::parse(["process.spawn"]).unwrap().allows("anything"));
        assert!(Grants::parse(["prompt.register"]).unwrap().is_empty());
    }

    #[test]
    fn rejects_malformed_process_grants() {
        for grant in [
            "process.spawn:",
            "process.spawn:a b",
            "process.spawn:./x",
            "process.spawn:bin/x",
            "process.spawn:/usr/../bin/x",
            "process.spawn:/usr//bin/x",
            "process.spawn:/usr/bin/",
            "process.spawn:..",
            "process.spawn:e\u{301}cho",
            "process.spawn:x;y",
            "process.exec",
            "process.spawn*",
        ] {
            let error = Grants::parse([grant]).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument, "{grant}");
        }
    }

    #[test]
    fn denies_by_default() {
        let config = ProcessHostConfig::disabled();
        assert_eq!(
            config.authorize("echo").unwrap_err().code(),
            ErrorCode::Validation
        );
        let config =
            ProcessHostConfig::new(enabled(), Grants::none(), Environment::from_parent(), "/")
                .unwrap();
        let error = config.authorize("echo").unwrap_err();
        assert_eq!(error.code(), ErrorCode::Validation);
        assert_eq!(error.message(), "capability denied: process.spawn:echo");
    }

    #[test]
    fn access_needs_both_policy_and_initialize() {
        for access in [
            ProcessAccess {
                allow_process: true,
                process_enabled: false,
            },
            ProcessAccess {
                allow_process: false,
                process_enabled: true,
            },
        ] {
            let grants = Grants::parse(["process.spawn"]).unwrap();
            let config =
                ProcessHostConfig::new(access, grants, Environment::from_parent(), "/").unwrap();
            let error = config.authorize("echo").unwrap_err();
            assert!(error.message().contains("process access is disabled"));
        }
    }

    #[test]
    fn resolves_bare_names_only_on_the_granted_path() {
        let grants = Grants::parse(["process.spawn:cat"]).unwrap();
        let environment = Environment::empty()
            .with("PATH", "relative:/nonexistent")
            .unwrap();
        let config = ProcessHostConfig::new(enabled(), grants.clone(), environment, "/").unwrap();
        assert_eq!(
            config.authorize("cat").unwrap_err().code(),
            ErrorCode::ProcessSpawn
        );
        let environment = Environment::empty()
            .with("PATH", "/nonexistent:/bin:/usr/bin")
            .unwrap();
        let config = ProcessHostConfig::new(enabled(), grants, environment, "/").unwrap();
        assert_eq!(config.authorize("cat").unwrap(), PathBuf::from("/bin/cat"));
    }

    #[test]
    fn validates_environment_entries_and_cwd() {
        let mut environment = Environment::empty();
        for name in ["", "1A", "A-B", "A=B", "Ä"] {
            assert!(environment.set(name, "x").is_err(), "{name}");
        }
        assert!(environment.set("A", "x\0y").is_err());
        environment.set("_A1", "x").unwrap();
        assert_eq!(environment.iter().count(), 1);
        for cwd in ["relative", "/nonexistent-dir-for-test", "/etc/passwd"] {
            assert!(
                ProcessHostConfig::new(enabled(), Grants::none(), Environment::empty(), cwd)
                    .is_err(),
                "{cwd}"
            );
        }
    }
}
