//! Several worker commands side by side (`--worker` given more than once):
//! X2 (warm round trip, pinned), X3 (cold start), X4 (kill latency) and
//! the Lua compute row (fib(27) through the worker process) for each
//! command, interleaved round by round (A B A B …) so that changes in
//! machine load hit every command alike. A row a command cannot run (it
//! errs) says `n/a` with the error, and is not retried in later rounds.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::{Worker, WorkerCommand};

use crate::inproc::{self, BoxError};
use crate::report::{Summary, format_time};
use crate::{Options, pingpong, supervise};

/// One command's samples of one row.
struct Cell {
    samples: Vec<Duration>,
    /// Median of each round, for per-round ratios.
    round_p50: Vec<f64>,
    failure: Option<String>,
}

/// One row: a measure, one cell per command.
pub struct SideRow {
    id: &'static str,
    what: &'static str,
    cells: Vec<Cell>,
}

#[derive(Clone, Copy)]
enum Measure {
    WarmPinned,
    ColdStart,
    Kill,
    Fib,
}

impl Measure {
    fn describe(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::WarmPinned => ("X2", "X2", "warm eval \"return 1\", pinned to one CPU"),
            Self::ColdStart => (
                "X3",
                "X3",
                "cold start: spawn -> initialize -> first response",
            ),
            Self::Kill => (
                "X4",
                "X4",
                "deadline -> worker killed and reaped (stuck in native code)",
            ),
            Self::Fib => ("L", "L", "fib(27): eval through the worker process"),
        }
    }

    /// One round's samples for `command`.
    fn round(self, options: &Options, command: &WorkerCommand) -> Result<Vec<Duration>, BoxError> {
        match self {
            Self::WarmPinned => {
                pingpong::set_affinity(&[0])?;
                let trips = supervise::warm_round_trips(command, options.n(500), options.n(2_000));
                pingpong::set_affinity(&pingpong::all_cpus())?;
                Ok(trips?.samples)
            }
            Self::ColdStart => Ok(supervise::cold_starts(command, options.n(20).min(20))?.1),
            Self::Kill => supervise::kill_latency(
                command,
                &options.kill_source,
                20,
                if options.quick { 4 } else { 10 },
            ),
            Self::Fib => {
                let mut worker = Worker::spawn(supervise::config(command)?)?;
                let mut samples = Vec::new();
                for index in 0..(if options.quick { 2 } else { 4 }) {
                    let started = Instant::now();
                    let value = worker.eval(inproc::FIB_SOURCE)?;
                    let elapsed = started.elapsed();
                    if value != serde_json::json!(inproc::FIB_RESULT) {
                        return Err(format!("fib returned {value}").into());
                    }
                    // The first call of a round warms up.
                    if index > 0 {
                        samples.push(elapsed);
                    }
                }
                worker.shutdown()?;
                Ok(samples)
            }
        }
    }
}

/// Measure every wanted row for every command, interleaved.
pub fn run(options: &Options, workers: &[WorkerCommand]) -> Vec<SideRow> {
    let measures: Vec<Measure> = [
        Measure::WarmPinned,
        Measure::ColdStart,
        Measure::Kill,
        Measure::Fib,
    ]
    .into_iter()
    .filter(|measure| options.wants(measure.describe().0))
    .collect();
    let rounds = if options.quick { 3 } else { 10 };
    let mut rows: Vec<SideRow> = measures
        .iter()
        .map(|measure| SideRow {
            id: measure.describe().1,
            what: measure.describe().2,
            cells: workers
                .iter()
                .map(|_| Cell {
                    samples: Vec::new(),
                    round_p50: Vec::new(),
                    failure: None,
                })
                .collect(),
        })
        .collect();
    for _ in 0..rounds {
        for (measure, row) in measures.iter().zip(&mut rows) {
            for (command, cell) in workers.iter().zip(&mut row.cells) {
                if cell.failure.is_some() {
                    continue;
                }
                match measure.round(options, command) {
                    Ok(samples) => {
                        if let Some(summary) = Summary::of(&samples) {
                            cell.round_p50.push(summary.p50);
                        }
                        cell.samples.extend(samples);
                    }
                    Err(error) => {
                        let text = error.to_string();
                        let first = text.lines().next().unwrap_or("error").to_owned();
                        cell.failure = Some(first);
                    }
                }
            }
        }
    }
    rows
}

/// Median of per-round ratios of `cell` to `base` (rounds both completed).
fn round_ratio(cell: &Cell, base: &Cell) -> Option<f64> {
    let mut ratios: Vec<f64> = cell
        .round_p50
        .iter()
        .zip(&base.round_p50)
        .filter(|(_, b)| **b > 0.0)
        .map(|(c, b)| c / b)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(ratios[ratios.len() / 2])
}

/// The side-by-side table and a legend of the commands.
pub fn render(rows: &[SideRow], workers: &[WorkerCommand], rounds_note: &str) -> String {
    let mut out = String::new();
    let _ = write!(out, "| X | measure |");
    for index in 1..=workers.len() {
        let _ = write!(out, " w{index} p50 | w{index} p99 |");
    }
    for index in 2..=workers.len() {
        let _ = write!(out, " w{index}/w1 |");
    }
    out.push('\n');
    let _ = write!(out, "| -- | ------- |");
    for _ in 0..workers.len() {
        out.push_str(" ---: | ---: |");
    }
    for _ in 1..workers.len() {
        out.push_str(" ---: |");
    }
    out.push('\n');
    let mut failures = Vec::new();
    for row in rows {
        let _ = write!(out, "| {} | {} |", row.id, row.what);
        for (index, cell) in row.cells.iter().enumerate() {
            match (&cell.failure, Summary::of(&cell.samples)) {
                (Some(failure), _) => {
                    let _ = write!(out, " n/a | n/a |");
                    failures.push(format!(
                        "{} {}, w{}: {failure}",
                        row.id,
                        row.what,
                        index + 1
                    ));
                }
                (None, Some(summary)) => {
                    let _ = write!(
                        out,
                        " {} | {} |",
                        format_time(summary.p50),
                        format_time(summary.p99)
                    );
                }
                (None, None) => {
                    let _ = write!(out, " - | - |");
                }
            }
        }
        for cell in row.cells.iter().skip(1) {
            match round_ratio(cell, &row.cells[0]) {
                Some(ratio) if cell.failure.is_none() && row.cells[0].failure.is_none() => {
                    let _ = write!(out, " {ratio:.2}x |");
                }
                _ => {
                    let _ = write!(out, " n/a |");
                }
            }
        }
        out.push('\n');
    }
    out.push('\n');
    for (index, worker) in workers.iter().enumerate() {
        let _ = writeln!(out, "- w{}: `{worker}`", index + 1);
    }
    let _ = writeln!(out, "- {rounds_note}");
    for failure in failures {
        let _ = writeln!(out, "- n/a: {failure}");
    }
    out
}
