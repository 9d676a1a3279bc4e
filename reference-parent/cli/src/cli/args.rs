//! Command-line arguments of `quirl-lua`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use quirl_lua_reference_parent::Containment;
use quirl_lua_reference_parent::process_host::DEFAULT_COMMAND_PIDS_MAX;

/// Default memory limit: 32 MiB (the `--memory` default, spelled `32MiB`).
#[cfg(test)]
pub(crate) const DEFAULT_MEMORY_BYTES: u64 = 32 * 1024 * 1024;
/// Default instruction budget per request.
pub(crate) const DEFAULT_INSTRUCTIONS: u64 = 100_000_000;
/// Default wall time per request, in milliseconds.
pub(crate) const DEFAULT_WALL_TIME_MS: u64 = 5_000;

/// Run Lua in a supervised, sandboxed worker process (quirl.lua-worker@1).
#[derive(Debug, Parser)]
#[command(name = "quirl-lua", version, about, long_about = None)]
#[command(after_help = EXIT_CODES_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) options: GlobalOptions,
    #[command(subcommand)]
    pub(crate) command: Command,
}

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the Lua code failed (guest error)
  2  usage error (bad arguments, unreadable file)
  3  resource limit (instructions, memory, wall time, deadline, cancellation)
  4  worker failure or protocol violation (the worker was killed)
  5  unavailable or quarantined

Environment:
  QUIRL_LUA_WORKER  worker command line used when --worker is not given";

/// Options shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct GlobalOptions {
    /// Memory limit of the Lua VM: bytes, or with a unit (KiB, MiB, GiB; K, M, G).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size, default_value = "32MiB")]
    pub(crate) memory: u64,
    /// Instruction budget per request.
    #[arg(long, global = true, value_name = "N", default_value_t = DEFAULT_INSTRUCTIONS)]
    pub(crate) instructions: u64,
    /// Wall-clock deadline per request, in milliseconds (covers host calls).
    #[arg(long = "wall-time-ms", global = true, value_name = "N", default_value_t = DEFAULT_WALL_TIME_MS)]
    pub(crate) wall_time_ms: u64,
    /// Let the guest run processes through the parent (quirl.process.run).
    #[arg(long = "allow-process", global = true)]
    pub(crate) allow_process: bool,
    /// Grant a capability (repeatable): `lua.load`, `lua.os`, `lua.io`,
    /// `process.spawn`, `process.spawn:PROGRAM`, or an SDK grant such as
    /// `prompt.register`. Any grant replaces the default set. With
    /// `lua.io`, `run` and `plugin --command` print what the script writes.
    #[arg(long = "grant", global = true, value_name = "CAP", value_parser = parse_grant)]
    pub(crate) grants: Vec<String>,
    /// Worker command line ("CMD ARGS"); default: this executable in worker mode.
    #[arg(long, global = true, value_name = "CMD")]
    pub(crate) worker: Option<String>,
    /// Print full JSON result and error records.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Containment of workers and host commands: `auto` (a cgroup v2 per
    /// child when writable, else process groups), `cgroup` or `process-group`.
    #[arg(long, global = true, value_name = "MODE", default_value = "auto", value_parser = parse_containment)]
    pub(crate) containment: Containment,
    /// How many processes each host command's tree may hold (pids.max of its cgroup, v2 or v1); `max` for no limit. Enforced or refused: where no pids controller can be written, a command with a limit fails (see --version --verbose).
    #[arg(long = "command-pids-max", global = true, value_name = "N|max", default_value = DEFAULT_COMMAND_PIDS_MAX_TEXT, value_parser = parse_pids_max)]
    pub(crate) command_pids_max: PidsLimit,
    /// Fail host commands closed where the Landlock execute ruleset cannot be applied, instead of falling back to the program list (DESIGN §16.6).
    #[arg(long = "require-landlock", global = true)]
    pub(crate) require_landlock: bool,
    /// With --version: also print the containment in effect.
    #[arg(long, global = true)]
    pub(crate) verbose: bool,
    /// Debugging only: run the worker without its lockdown (passes --no-lockdown to the worker: no seccomp filter; and no resource limits).
    #[arg(long = "no-lockdown", global = true)]
    pub(crate) no_lockdown: bool,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Evaluate a Lua chunk and print its value as JSON.
    Eval {
        /// Lua source, e.g. 'return 6 * 7'.
        source: String,
        #[command(flatten)]
        modules: ModuleArgs,
    },
    /// Run a Lua script with arguments, input and environment, print its
    /// execution outcome, and exit with the script's own status.
    Run {
        /// The script.
        file: PathBuf,
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        modules: ModuleArgs,
        /// Arguments passed to the script (after the options).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Load a Quirl configuration file (`load_config`) and print the
    /// validated configuration.
    Config {
        /// The configuration file.
        file: PathBuf,
    },
    /// Compile and lint a Lua file without running it; exit 1 on errors.
    ///
    /// Errors (exit 1): undefined globals called or indexed, what the
    /// sandbox leaves out under the grants given (`io`, `os`, `print`,
    /// `load`, …), unknown members of its library tables, SDK calls with
    /// too few arguments, misspelt annotation tags. Warnings (exit 0):
    /// unused locals, shadowing, global assignments, and the same problems
    /// where the code guards them (`pcall`, `if io then`). Each is printed
    /// with its file:line:column, the source line and a caret; `--json`
    /// prints the report record.
    Check {
        /// The file to check.
        file: PathBuf,
    },
    /// Run a Lua test file and print the number of tests that passed.
    Test {
        /// The test file.
        file: PathBuf,
    },
    /// Load a plugin, print its registrations, or invoke one of its callbacks.
    Plugin(PluginArgs),
    /// Read JSON lines from stdin, one operation each, and run them on a
    /// supervised pool of workers (one by default).
    Batch(BatchArgs),
    /// Run JSON lines from stdin like `batch`, but print only the pool's
    /// stats (one JSON object: name, generation, pid, running, invocations,
    /// crashes, timeouts, restarts, quarantined, last error code, latency
    /// percentiles, per member) after the last line.
    Stats(BatchArgs),
}

/// `quirl-lua batch [--pool N] [--max-restarts N] [--spares N] [--stats] [--plugin FILE]`.
#[derive(Debug, Args)]
pub(crate) struct BatchArgs {
    /// Number of workers; lines then run concurrently, results stay in input order.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) pool: u16,
    /// Worker failures (deadline, crash, protocol violation, a worker that
    /// could not start) tolerated within 5 minutes, each followed by a fresh
    /// worker; one more quarantines the pool and every later line fails at
    /// once (exit 5). A tripped limit is no failure: its worker is replaced.
    #[arg(long = "max-restarts", value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub(crate) max_restarts: u32,
    /// Warm spare workers kept ready in the background, so that replacing a
    /// failed worker costs the next line no cold start (DESIGN §17.7). None by
    /// default: a batch is short, and a spare costs a cold start of its own.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=8))]
    pub(crate) spares: u8,
    /// After all results, print the pool's stats as one JSON line.
    #[arg(long)]
    pub(crate) stats: bool,
    /// Load this plugin into every worker first, so that lines can call its
    /// callbacks (`prompt`, `complete`, `command`, `event`).
    #[arg(long, value_name = "FILE")]
    pub(crate) plugin: Option<PathBuf>,
    /// Print one line per input line (false for `stats`, which prints only
    /// the stats line).
    #[arg(skip = true)]
    pub(crate) results: bool,
}

/// What `run` and `plugin --command` hand the script besides its
/// arguments: input and environment variables.
#[derive(Debug, Args)]
pub(crate) struct InputArgs {
    /// Read standard input to its end and hand it to the script as bytes
    /// (`ctx.input = {kind = "bytes", content = {…}}`).
    #[arg(long, conflicts_with = "input_json")]
    pub(crate) stdin: bool,
    /// Hand the script this JSON value as a structured value
    /// (`ctx.input = {kind = "value", content = …}`).
    #[arg(long = "input-json", value_name = "VALUE")]
    pub(crate) input_json: Option<String>,
    /// Set an environment variable the script sees in `ctx.env` (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub(crate) env: Vec<(String, String)>,
}

/// Lua modules `require` finds (`eval` and `run`).
#[derive(Debug, Args)]
pub(crate) struct ModuleArgs {
    /// Preload the Lua module NAME from FILE before the script runs, so that
    /// `require("NAME")` runs FILE (repeatable; needs `--grant lua.load`).
    /// FILE is compiled first and named `@FILE`, so its errors read
    /// `FILE:LINE: …`.
    #[arg(long = "module", value_name = "NAME=FILE", value_parser = parse_module)]
    pub(crate) modules: Vec<(String, PathBuf)>,
}

/// Parse `NAME=FILE` (both non-empty, no NUL in the name).
pub(crate) fn parse_module(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !name.contains('\0') && !file.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(file)))
        }
        _ => Err(format!(
            "`{text}` is not NAME=FILE (a non-empty module name without `=` or NUL, and a file)"
        )),
    }
}

/// Parse `NAME=VALUE` (the name non-empty, without `=` or NUL).
pub(crate) fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value))
            if !name.is_empty() && !name.contains('\0') && !value.contains('\0') =>
        {
            Ok((name.to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "`{text}` is not NAME=VALUE (a non-empty name without `=`, no NUL bytes)"
        )),
    }
}

/// `quirl-lua plugin FILE [--prompt NAME | --complete COMMAND | --command NAME | --contribution NAME | --event JSON]`.
#[derive(Debug, Args)]
pub(crate) struct PluginArgs {
    /// The plugin source file.
    pub(crate) file: PathBuf,
    /// Render the prompt segment NAME.
    #[arg(long, value_name = "NAME", group = "invoke")]
    pub(crate) prompt: Option<String>,
    /// Ask the completion provider for COMMAND.
    #[arg(long, value_name = "COMMAND", group = "invoke")]
    pub(crate) complete: Option<String>,
    /// Run the plugin command NAME.
    #[arg(long, value_name = "NAME", group = "invoke")]
    pub(crate) command: Option<String>,
    /// Invoke the contribution NAME (`contribution` operation) with an
    /// empty context.
    #[arg(long, value_name = "NAME", group = "invoke")]
    pub(crate) contribution: Option<String>,
    /// The kind of the contribution (`catalog`, `completion`, `panel`);
    /// needed only when the plugin registered NAME for more than one kind.
    #[arg(long, value_name = "KIND", requires = "contribution")]
    pub(crate) kind: Option<String>,
    /// Dispatch an extension event given as JSON.
    #[arg(long, value_name = "JSON", group = "invoke")]
    pub(crate) event: Option<String>,
    /// Input and environment for --command.
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Arguments for --command.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        requires = "command"
    )]
    pub(crate) args: Vec<String>,
}

/// A grant the worker knows (SPEC §7.1): one of its grant strings or
/// `process.spawn:PROGRAM`. Anything else is a usage error naming the
/// closest known grant (the worker would ignore it, granting nothing).
pub(crate) fn parse_grant(text: &str) -> Result<String, String> {
    use quirl_lua_reference_worker::sandbox::grants::{KNOWN_GRANTS, is_known_grant};
    if is_known_grant(text) {
        return Ok(text.to_owned());
    }
    let lower = text.to_ascii_lowercase();
    let closest = KNOWN_GRANTS
        .iter()
        .copied()
        .chain(std::iter::once("process.spawn:PROGRAM"))
        .map(|known| (strsim::jaro_winkler(&lower, known), known))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .filter(|(score, _)| *score >= 0.8);
    let known = KNOWN_GRANTS.join(", ");
    Err(match closest {
        Some((_, known_grant)) => format!(
            "unknown grant `{text}`: did you mean `{known_grant}`? (known: {known}, process.spawn:PROGRAM)"
        ),
        None => format!("unknown grant `{text}` (known: {known}, process.spawn:PROGRAM)"),
    })
}

fn parse_containment(text: &str) -> Result<Containment, String> {
    text.parse()
}

/// The `--command-pids-max` default, as the flag spells it.
const DEFAULT_COMMAND_PIDS_MAX_TEXT: &str = "256";
const _: () = assert!(DEFAULT_COMMAND_PIDS_MAX == 256);

/// A host command's process limit: a count, or none (`max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PidsLimit(pub(crate) Option<u64>);

/// `N` (at least 1) or `max` (no limit, as cgroup's `pids.max` spells it).
pub(crate) fn parse_pids_max(text: &str) -> Result<PidsLimit, String> {
    if text == "max" {
        return Ok(PidsLimit(None));
    }
    match text.parse::<u64>() {
        Ok(count) if count >= 1 => Ok(PidsLimit(Some(count))),
        _ => Err(format!(
            "`{text}` is not a process count (a whole number from 1, or `max` for no limit)"
        )),
    }
}

/// Parse `33554432`, `32MiB`, `512KiB`, `1G`, … into bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "`{text}` is not a size (expected e.g. 32MiB or 33554432)"
        ));
    }
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{digits}` is too large"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB or GiB)"
            ));
        }
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn unknown_grants_are_refused_with_the_closest_known_one() {
        for grant in [
            "lua.load",
            "lua.os",
            "lua.io",
            "process.spawn",
            "process.spawn:git",
            "ui.panel",
        ] {
            assert_eq!(parse_grant(grant), Ok(grant.to_owned()));
        }
        let laod = parse_grant("lua.laod").unwrap_err();
        assert!(laod.contains("did you mean `lua.load`?"), "{laod}");
        let io = parse_grant("lua.IO").unwrap_err();
        assert!(io.contains("did you mean `lua.io`?"), "{io}");
        let spawn = parse_grant("process.spwan").unwrap_err();
        assert!(spawn.contains("did you mean `process.spawn`?"), "{spawn}");
        let bogus = parse_grant("bogus").unwrap_err();
        assert!(bogus.starts_with("unknown grant `bogus`"), "{bogus}");
        assert!(!bogus.contains("did you mean"), "{bogus}");
        assert!(bogus.contains("lua.os"), "{bogus}");
        assert!(parse_grant("process.spawn:").is_err());
        assert!(parse_grant("").is_err());
    }

    #[test]
    fn parses_sizes_with_and_without_units() {
        assert_eq!(parse_size("33554432"), Ok(DEFAULT_MEMORY_BYTES));
        assert_eq!(parse_size("32MiB"), Ok(DEFAULT_MEMORY_BYTES));
        assert_eq!(parse_size("32M"), Ok(DEFAULT_MEMORY_BYTES));
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("18446744073709551615GiB").is_err());
    }

    #[test]
    fn parses_environment_assignments() {
        assert_eq!(
            parse_env("NAME=Ada=Lovelace"),
            Ok(("NAME".to_owned(), "Ada=Lovelace".to_owned()))
        );
        assert_eq!(parse_env("EMPTY="), Ok(("EMPTY".to_owned(), String::new())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("NOVALUE").is_err());
        assert!(parse_env("A\0B=x").is_err());
    }

    #[test]
    fn parses_module_assignments() {
        assert_eq!(
            parse_module("lib.json=vendor/json.lua"),
            Ok(("lib.json".to_owned(), PathBuf::from("vendor/json.lua")))
        );
        assert_eq!(
            parse_module("a=b=c.lua"),
            Ok(("a".to_owned(), PathBuf::from("b=c.lua")))
        );
        assert!(parse_module("=json.lua").is_err());
        assert!(parse_module("json=").is_err());
        assert!(parse_module("json.lua").is_err());
        assert!(parse_module("a\0b=x.lua").is_err());
    }

    #[test]
    fn parses_process_limits() {
        assert_eq!(parse_pids_max("16"), Ok(PidsLimit(Some(16))));
        assert_eq!(parse_pids_max("max"), Ok(PidsLimit(None)));
        assert!(parse_pids_max("0").is_err());
        assert!(parse_pids_max("-1").is_err());
        assert!(parse_pids_max("none").is_err());
        assert_eq!(
            parse_pids_max(DEFAULT_COMMAND_PIDS_MAX_TEXT),
            Ok(PidsLimit(Some(DEFAULT_COMMAND_PIDS_MAX)))
        );
    }

    #[test]
    fn the_command_line_interface_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
