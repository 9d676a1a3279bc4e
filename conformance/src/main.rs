//! `quirl-conformance`: conformance tools for `quirl.lua-worker@1`.

use clap::{Parser, Subcommand};
use quirl_lua_conformance::decode::{self, Direction};
use std::io::{self, Write};
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode { direction } => {
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
    }
}
