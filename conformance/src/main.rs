//! `quirl-conformance`: conformance tools for `quirl.lua-worker@1`.
//!
//! The suites' data is compiled in (`embedded`): the binary runs from any
//! directory, with no source tree. `--version` names the case counts and
//! the SPEC.md revision the suites check.

use clap::{Args, Parser, Subcommand};
use quirl_lua_conformance::decode::{self, Direction};
use quirl_lua_conformance::embedded::{self, Fixtures};
use quirl_lua_conformance::exec::{self, Case, RunOptions};
use quirl_lua_conformance::profile::Profile;
use quirl_lua_conformance::report::ExpectedFailures;
use quirl_lua_conformance::{fake_worker, parent, worker};
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "quirl-conformance", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode framed bytes from stdin with the reference decoder.
    ///
    /// Prints `ok <canonical JSON>` for every frame, or `error <sub-kind>
    /// <message>` at the first failure and stops. Exits 0 when every frame
    /// decoded and the input ended at a frame boundary, 1 otherwise.
    Decode {
        /// Which frames the input holds.
        #[arg(long, value_enum)]
        direction: Direction,
    },
    /// Judge a worker: play a (hostile) parent against `CMD [ARGS…]`,
    /// one fresh worker process per case.
    Worker {
        #[command(flatten)]
        options: SuiteOptions,
        /// Directory holding golden fixtures (manifest.json, frames/) to use
        /// instead of the copy compiled into this binary.
        #[arg(long, value_name = "DIR")]
        fixtures: Option<PathBuf>,
        /// The worker command and its arguments.
        #[arg(last = true, required_unless_present = "list", value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Judge a parent: run `CMD [ARGS…]` against scripted hostile workers
    /// (see `fake-worker` and README: the parent contract).
    Parent {
        #[command(flatten)]
        options: SuiteOptions,
        /// The parent command and its arguments.
        #[arg(last = true, required_unless_present = "list", value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Be a scripted (mostly hostile) worker: the parent suite's case CASE.
    FakeWorker {
        /// Case name of the parent suite.
        case: String,
        /// File to record pids, children and timestamps in.
        #[arg(long, value_name = "FILE")]
        pid_file: PathBuf,
    },
}

#[derive(Debug, Args)]
struct SuiteOptions {
    /// Known failures: one case name per line, `# reason` comments.
    #[arg(long, value_name = "FILE")]
    expected_failures: Option<PathBuf>,
    /// Print one JSON report instead of text lines.
    #[arg(long)]
    json: bool,
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,
    /// Run only what binds a worker without Lua: the `protocol` cases whose
    /// answers are judged by envelope (no `sdk`, no Lua semantics). Such a
    /// worker answers `initialize`, `eval` of `return <decimal integer>`
    /// with the integer, and every other request with `invalid_command`.
    #[arg(long)]
    protocol_only: bool,
    /// Cases run at once (default: the number of cores, at least 2).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// List the cases (name, spec section, tags) and exit.
    #[arg(long)]
    list: bool,
}

/// The `--version` text: the suites' case counts and the SPEC revision.
fn version_text() -> String {
    let mut text = format!(
        "quirl-conformance {}\nchecks: SPEC.md revision {} (protocol text fnv1a64 {}), protocol {}\n",
        env!("CARGO_PKG_VERSION"),
        embedded::SPEC_REVISION,
        embedded::SPEC_DIGEST,
        "quirl.lua-worker@1",
    );
    match worker::suite(Vec::new(), &Fixtures::Embedded) {
        Ok(cases) => {
            let count = |profile: Profile| cases.iter().filter(|c| c.profile() == profile).count();
            let sdk = cases
                .iter()
                .filter(|c| c.tags().iter().any(|t| t == "sdk"))
                .count();
            let protocol_only = cases.iter().filter(|c| c.protocol_only()).count();
            text.push_str(&format!(
                "worker suite: {} cases ({} protocol, {} reference-sandbox; {sdk} need the sdk; {protocol_only} in a --protocol-only run)\n",
                cases.len(),
                count(Profile::Protocol),
                count(Profile::ReferenceSandbox),
            ));
        }
        Err(error) => text.push_str(&format!("worker suite: invalid ({error})\n")),
    }
    match parent::all_cases() {
        Ok(cases) => text.push_str(&format!("parent suite: {} cases\n", cases.len())),
        Err(error) => text.push_str(&format!("parent suite: invalid ({error})\n")),
    }
    text
}

fn main() -> ExitCode {
    let first = std::env::args_os().nth(1);
    if first
        .as_deref()
        .is_some_and(|arg| arg == "--version" || arg == "-V")
    {
        let _ = io::stdout().write_all(version_text().as_bytes());
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Decode { direction } => decode_command(direction),
        Command::Worker {
            options,
            fixtures,
            command,
        } => match worker::suite(
            command.clone(),
            &fixtures.map_or(Fixtures::Embedded, Fixtures::Dir),
        ) {
            Ok(cases) => run(&cases, "worker", &options, &command),
            Err(error) => usage(&error),
        },
        Command::Parent { options, command } => {
            let exe = match std::env::current_exe() {
                Ok(exe) => exe,
                Err(error) => return usage(&format!("cannot locate this executable: {error}")),
            };
            match parent::suite(command.clone(), exe) {
                Ok(cases) => {
                    if let Err(error) = quirl_lua_conformance::proc::become_subreaper() {
                        return usage(&format!("cannot become a child subreaper: {error}"));
                    }
                    let status = run(&cases, "parent", &options, &command);
                    quirl_lua_conformance::proc::reap_orphans();
                    status
                }
                Err(error) => usage(&error),
            }
        }
        Command::FakeWorker { case, pid_file } => fake_worker::main(&case, &pid_file),
    }
}

fn usage(message: &str) -> ExitCode {
    let _ = writeln!(io::stderr(), "quirl-conformance: {message}");
    ExitCode::from(2)
}

fn run<C: Case>(
    cases: &[C],
    suite: &str,
    options: &SuiteOptions,
    command: &[OsString],
) -> ExitCode {
    if options.list {
        let stdout = io::stdout();
        let mut out = stdout.lock();
        for case in cases {
            let mut tags = case.tags().to_vec();
            if case.protocol_only() {
                tags.push("protocol-only".to_owned());
            }
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}",
                case.name(),
                case.spec(),
                case.profile(),
                tags.join(",")
            );
        }
        return ExitCode::SUCCESS;
    }
    let expected = match &options.expected_failures {
        Some(path) => match ExpectedFailures::load(path) {
            Ok(list) => list,
            Err(error) => return usage(&error),
        },
        None => ExpectedFailures::default(),
    };
    let run_options = RunOptions {
        suite: suite.to_owned(),
        command: command
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect(),
        jobs: options.jobs.unwrap_or_else(exec::default_jobs),
        filter: options.filter.clone(),
        protocol_only: options.protocol_only,
        expected,
        json: options.json,
    };
    match exec::run_suite(cases, &run_options, io::stdout()) {
        Ok(summary) if summary.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => usage(&format!("cannot write the report: {error}")),
    }
}

fn decode_command(direction: Direction) -> ExitCode {
    let stdout = io::stdout();
    let output = io::BufWriter::new(stdout.lock());
    match decode::decode_stream(direction, io::stdin().lock(), output) {
        Ok(summary) if summary.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            // The report could not be written (e.g. a closed pipe).
            let _ = writeln!(io::stderr(), "quirl-conformance: {error}");
            ExitCode::FAILURE
        }
    }
}
