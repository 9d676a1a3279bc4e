//! Which program runs as the worker, with which arguments and environment.
//!
//! A [`WorkerCommand`] is plain data: program, arguments, the declared
//! environment entries (everything else is cleared) and an optional working
//! directory. Spawning it is the (private) `worker_spawn` module's job.
//!
//! The default is the current executable with [`WORKER_ARGUMENT`], so the
//! `quirl-lua` binary carries its own worker. Any other command that speaks
//! `quirl.lua-worker@1` on stdin/stderr works too, e.g. Quirl's own
//! `quirl --internal-lua-worker-v1`, or a conformance runner's scripted fake
//! injected through [`WORKER_COMMAND_ENV`].
//!
//! A command line is split into words by the crate's one POSIX word
//! splitter (the process host's command language, DESIGN §16.4) in its
//! worker-command-line dialect: the same quoting and escapes, nothing
//! expanded, shell syntax taken literally (DESIGN §17.2).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::process_host::command_language::{Dialect, split_words as split_posix_words};

/// First argument that selects worker mode in the default worker command
/// (the protocol crate's one definition, re-exported).
pub use quirl_lua_protocol::limits::WORKER_ARGUMENT;

/// Environment variable holding a worker command line (`"CMD ARGS"`), read
/// by the `quirl-lua` CLI when `--worker` is not given.
pub const WORKER_COMMAND_ENV: &str = "QUIRL_LUA_WORKER";

/// Longest worker command line accepted by [`WorkerCommand::parse`].
pub const WORKER_COMMAND_LINE_BYTES_MAX: usize = 64 * 1024;

/// The program, arguments and environment of a worker process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
}

/// Why a worker command line could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandLineError {
    message: String,
}

impl fmt::Display for CommandLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CommandLineError {}

impl CommandLineError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl WorkerCommand {
    /// A command running `program` with no arguments and an empty environment.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            current_dir: None,
        }
    }

    /// The current executable with [`WORKER_ARGUMENT`].
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self::new(std::env::current_exe()?).arg(WORKER_ARGUMENT))
    }

    /// Parse a command line such as `"quirl --internal-lua-worker-v1"`.
    ///
    /// Words are split POSIX-style on blanks, with single quotes, double
    /// quotes and backslash escapes; nothing is expanded. A program without a
    /// `/` is looked up in this process's `PATH` now, because the worker's own
    /// environment is cleared.
    pub fn parse(line: &str) -> Result<Self, CommandLineError> {
        if line.len() > WORKER_COMMAND_LINE_BYTES_MAX {
            return Err(CommandLineError::new(format!(
                "worker command line is {} bytes; the limit is {WORKER_COMMAND_LINE_BYTES_MAX}",
                line.len()
            )));
        }
        let mut words = split_words(line)?.into_iter();
        let Some(program) = words.next() else {
            return Err(CommandLineError::new("worker command line is empty"));
        };
        let program = resolve_program(&program)?;
        Ok(Self {
            program,
            args: words.map(OsString::from).collect(),
            env: Vec::new(),
            current_dir: None,
        })
    }

    /// Append one argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Declare one environment entry for the worker (the rest is cleared).
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Run the worker in `dir` instead of the parent's working directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// The program to execute.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The arguments after the program.
    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// The declared environment entries.
    pub fn envs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// The working directory, if one was set.
    pub fn dir(&self) -> Option<&Path> {
        self.current_dir.as_deref()
    }
}

impl fmt::Display for WorkerCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.args {
            write!(f, " {}", arg.to_string_lossy())?;
        }
        Ok(())
    }
}

fn resolve_program(program: &str) -> Result<PathBuf, CommandLineError> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| {
            CommandLineError::new(format!("worker program `{program}` was not found in PATH"))
        })
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// POSIX-style word splitting without expansion: the command language's
/// splitter in its worker-command-line dialect (DESIGN §17.2).
fn split_words(line: &str) -> Result<Vec<String>, CommandLineError> {
    split_posix_words(line, Dialect::WorkerCommandLine).map_err(|error| {
        let mut message = format!("worker command line: {}", error.message());
        for context in error.context() {
            message.push_str(&format!(" ({context})"));
        }
        CommandLineError::new(message)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_with_quotes_and_escapes() {
        assert_eq!(
            split_words(r#"a  'b c' "d \"e\"" f\ g ''"#).unwrap(),
            vec!["a", "b c", "d \"e\"", "f g", ""]
        );
    }

    #[test]
    fn shell_syntax_is_literal_and_newlines_are_blanks() {
        // DESIGN §17.2: nothing is expanded; unlike the command language
        // (DESIGN §16.4) nothing is rejected for meaning something in `sh`.
        assert_eq!(
            split_words("a|b $HOME *.rs ~ #c; \"$x\" `y`\nz").unwrap(),
            vec!["a|b", "$HOME", "*.rs", "~", "#c;", "$x", "`y`", "z"]
        );
        assert!(split_words("a\0b").is_err());
    }

    #[test]
    fn rejects_unterminated_quotes_and_empty_lines() {
        assert!(split_words("a 'b").is_err());
        assert!(split_words("a \"b").is_err());
        assert!(split_words("a \\").is_err());
        assert!(WorkerCommand::parse("   ").is_err());
    }

    #[test]
    fn resolves_a_bare_program_through_path() {
        let command = WorkerCommand::parse("sh -c 'exit 0'").unwrap();
        assert!(command.program().is_absolute());
        assert_eq!(
            command.args(),
            &[OsString::from("-c"), OsString::from("exit 0")]
        );
    }

    #[test]
    fn keeps_a_path_with_a_slash_as_given() {
        let command = WorkerCommand::parse("./worker --flag").unwrap();
        assert_eq!(command.program(), Path::new("./worker"));
    }

    #[test]
    fn reports_a_missing_program() {
        let error = WorkerCommand::parse("quirl-lua-no-such-program-9c1f").unwrap_err();
        assert!(error.to_string().contains("not found"));
    }
}
