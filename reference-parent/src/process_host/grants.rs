//! Deny-by-default grants: which programs, which environment, which
//! working directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::error::{HostError, HostErrorCode};

/// The grant that allows every program (Quirl's unscoped capability).
pub const PROCESS_SPAWN_GRANT: &str = "process.spawn";
/// Prefix of a grant for one program: `process.spawn:NAME`.
pub const PROCESS_SPAWN_GRANT_PREFIX: &str = "process.spawn:";
/// Characters allowed in a granted program NAME besides ASCII letters and
/// digits (Quirl's scoped-grant alphabet without the space).
const NAME_PUNCTUATION: &str = "-_./:=,@%+";

/// The program allowlist parsed from grant strings.
///
/// The default value grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    any_program: bool,
    names: std::collections::BTreeSet<String>,
}

impl Grants {
    /// No programs.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parse the grant strings a parent passes at initialize.
    ///
    /// `process.spawn` grants every program; `process.spawn:NAME` grants one.
    /// Any other string starting with `process.` is rejected (fail closed on
    /// a misspelt grant); strings outside the `process.` namespace are
    /// capabilities of the worker and are ignored here.
    pub fn parse<I, S>(grants: I) -> Result<Self, HostError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed = Self::none();
        for grant in grants {
            let grant = grant.as_ref();
            if grant == PROCESS_SPAWN_GRANT {
                parsed.any_program = true;
            } else if let Some(name) = grant.strip_prefix(PROCESS_SPAWN_GRANT_PREFIX) {
                validate_program_name(name).map_err(|error| {
                    error.with_context(format!("grant `{}`", truncate_for_display(grant)))
                })?;
                parsed.names.insert(name.to_owned());
            } else if grant.starts_with("process.") {
                return Err(HostError::new(
                    HostErrorCode::InvalidArgument,
                    format!("unknown process grant `{}`", truncate_for_display(grant)),
                )
                .with_help("Use `process.spawn:NAME` for one program or `process.spawn` for all"));
            }
        }
        Ok(parsed)
    }

    /// Grant one program by NAME (a bare name or an absolute path).
    pub fn allow_program(mut self, name: &str) -> Result<Self, HostError> {
        validate_program_name(name)?;
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

fn validate_program_name(name: &str) -> Result<(), HostError> {
    let bad = |reason: &str| {
        HostError::new(
            HostErrorCode::InvalidArgument,
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

/// The environment a child starts with: nothing but these entries.
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

    /// `PATH` and `HOME` copied from this process's environment, each only
    /// when it is set. This is the documented default base.
    pub fn from_parent() -> Self {
        let mut environment = Self::empty();
        for name in ["PATH", "HOME"] {
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
                HostErrorCode::InvalidArgument,
                format!("invalid environment name `{}`", truncate_for_display(name)),
            )
            .with_help("Environment names use ASCII letters, digits and underscores and do not start with a digit"));
        }
        if value.as_bytes().contains(&0) {
            return Err(HostError::new(
                HostErrorCode::InvalidArgument,
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
}

impl ProcessHostConfig {
    /// A host that denies every call.
    pub fn disabled() -> Self {
        Self {
            access: ProcessAccess::default(),
            grants: Grants::none(),
            environment: Environment::empty(),
            cwd: PathBuf::from("/"),
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
                HostErrorCode::InvalidArgument,
                "working directory must be an absolute path",
            )
            .with_context(format!("observed `{}`", cwd.display())));
        }
        if cwd.as_os_str().as_bytes().contains(&0) {
            return Err(HostError::new(
                HostErrorCode::InvalidArgument,
                "working directory contains a NUL byte",
            ));
        }
        match std::fs::metadata(&cwd) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                return Err(HostError::new(
                    HostErrorCode::InvalidArgument,
                    "working directory is not a directory",
                )
                .with_context(format!("path `{}`", cwd.display())));
            }
            Err(error) => {
                return Err(HostError::new(
                    HostErrorCode::InvalidArgument,
                    "working directory is not accessible",
                )
                .with_context(format!("path `{}`: {error}", cwd.display())));
            }
        }
        Ok(Self {
            access,
            grants,
            environment,
            cwd,
        })
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
                HostErrorCode::Validation,
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
        self.resolve(program)
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
                HostErrorCode::ProcessSpawn,
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
        for directory in std::env::split_paths(path) {
            // Empty and relative entries would search the working directory.
            if !directory.is_absolute() {
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
        Err(not_found())
    }
}

fn access_denied(access: ProcessAccess) -> HostError {
    HostError::new(
        HostErrorCode::Validation,
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
            assert_eq!(error.code(), HostErrorCode::InvalidArgument, "{grant}");
        }
    }

    #[test]
    fn denies_by_default() {
        let config = ProcessHostConfig::disabled();
        assert_eq!(
            config.authorize("echo").unwrap_err().code(),
            HostErrorCode::Validation
        );
        let config =
            ProcessHostConfig::new(enabled(), Grants::none(), Environment::from_parent(), "/")
                .unwrap();
        let error = config.authorize("echo").unwrap_err();
        assert_eq!(error.code(), HostErrorCode::Validation);
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
        let grants = Grants::parse(["process.spawn:sh"]).unwrap();
        let environment = Environment::empty()
            .with("PATH", "relative:/nonexistent")
            .unwrap();
        let config = ProcessHostConfig::new(enabled(), grants.clone(), environment, "/").unwrap();
        assert_eq!(
            config.authorize("sh").unwrap_err().code(),
            HostErrorCode::ProcessSpawn
        );
        let environment = Environment::empty()
            .with("PATH", "/nonexistent:/bin:/usr/bin")
            .unwrap();
        let config = ProcessHostConfig::new(enabled(), grants, environment, "/").unwrap();
        assert_eq!(config.authorize("sh").unwrap(), PathBuf::from("/bin/sh"));
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
