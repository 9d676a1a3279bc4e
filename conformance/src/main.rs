//! `quirl-conformance`: conformance tools for `quirl.lua-worker@1`.

use clap::{Args, Parser, Subcommand};
use quirl_lua_conformance::decode::{self, Direction};
use quirl_lua_conformance::exec::{self, Case, RunOptions};
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
        /// Directory holding the golden fixtures (manifest.json, frames/).
        #[arg(long, value_name = "DIR", default_value = default_fixtures())]
        fixtures: PathBuf,
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
    /// Skip cases tagged `sdk` (they depend on the Quirl Lua SDK).
    #[arg(long)]
    protocol_only: bool,
    /// Cases run at once (default: the number of cores, at least 2).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// List the cases (name, spec section, tags) and exit.
    #[arg(long)]
    list: bool,
}

fn default_fixtures() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode { direction } => decode_command(direction),
        Command::Worker {
            options,
            fixtures,
            command,
        } => match worker::suite(command.clone(), &fixtures) {
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
            let _ = writeln!(
                out,
                "{}\t{}\t{}",
                case.name(),
                case.spec(),
                case.tags().join(",")
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
