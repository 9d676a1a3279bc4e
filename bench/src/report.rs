//! Samples, percentiles and the side-by-side table.

use std::fmt::Write as _;
use std::time::Duration;

/// Percentiles of one set of samples, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub p50: f64,
    pub p99: f64,
}

impl Summary {
    /// Summarize samples given in nanoseconds (sorted in place).
    pub fn of_nanos(samples: &mut [f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[index.min(samples.len() - 1)]
        };
        Some(Self {
            p50: at(0.5),
            p99: at(0.99),
        })
    }

    /// Summarize durations.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let mut nanos: Vec<f64> = samples.iter().map(|d| d.as_nanos() as f64).collect();
        Self::of_nanos(&mut nanos)
    }
}

/// How a row's values are printed.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Time,
    Bytes,
    /// Operations per second (higher is better).
    Rate,
}

/// One measured quantity: median and p99 (p99 may be absent).
#[derive(Debug, Clone, Copy)]
pub struct Value {
    pub p50: f64,
    pub p99: Option<f64>,
}

impl Value {
    pub fn time(summary: Summary) -> Self {
        Self {
            p50: summary.p50,
            p99: Some(summary.p99),
        }
    }

    pub fn single(value: f64) -> Self {
        Self {
            p50: value,
            p99: None,
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: &'static str,
    pub what: String,
    pub unit: Unit,
    pub ours: Value,
    pub baseline_name: String,
    pub baseline: Option<Value>,
    /// Target as text (e.g. "<= 1.15x", "<= 5 ms").
    pub target: String,
    /// Whether the target is met; `None` for rows without a target.
    pub met: Option<bool>,
}

impl Row {
    /// ours / baseline at the median (baseline / ours for rates).
    pub fn ratio(&self) -> Option<f64> {
        let baseline = self.baseline?;
        if baseline.p50 <= 0.0 || self.ours.p50 <= 0.0 {
            return None;
        }
        Some(match self.unit {
            Unit::Rate => self.ours.p50 / baseline.p50,
            _ => self.ours.p50 / baseline.p50,
        })
    }
}

pub fn format_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Time => format_time(value),
        Unit::Bytes => format_bytes(value),
        Unit::Rate => format!("{value:.1}/s"),
    }
}

pub fn format_time(nanos: f64) -> String {
    if nanos < 1_000.0 {
        format!("{nanos:.0} ns")
    } else if nanos < 1_000_000.0 {
        format!("{:.2} us", nanos / 1_000.0)
    } else if nanos < 1_000_000_000.0 {
        format!("{:.2} ms", nanos / 1_000_000.0)
    } else {
        format!("{:.2} s", nanos / 1_000_000_000.0)
    }
}

pub fn format_bytes(bytes: f64) -> String {
    if bytes < 10_240.0 {
        format!("{bytes:.0} B")
    } else if bytes < 10.0 * 1_048_576.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.2} MiB", bytes / 1_048_576.0)
    }
}

fn cell(value: Option<Value>, unit: Unit) -> (String, String) {
    match value {
        None => ("-".to_owned(), "-".to_owned()),
        Some(value) => (
            format_value(value.p50, unit),
            value
                .p99
                .map_or_else(|| "-".to_owned(), |p99| format_value(p99, unit)),
        ),
    }
}

/// Render rows as a Markdown table (readable in a terminal too).
pub fn render(rows: &[Row]) -> String {
    let mut lines: Vec<[String; 10]> = Vec::new();
    lines.push(
        [
            "X", "measure", "ours p50", "ours p99", "baseline", "base p50", "base p99", "ratio",
            "target", "met",
        ]
        .map(str::to_owned),
    );
    for row in rows {
        let (ours50, ours99) = cell(Some(row.ours), row.unit);
        let (base50, base99) = cell(row.baseline, row.unit);
        let ratio = row
            .ratio()
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        lines.push([
            row.id.to_owned(),
            row.what.clone(),
            ours50,
            ours99,
            row.baseline_name.clone(),
            base50,
            base99,
            ratio,
            row.target.clone(),
            met.to_owned(),
        ]);
    }
    let mut widths = [0_usize; 10];
    for line in &lines {
        for (width, text) in widths.iter_mut().zip(line) {
            *width = (*width).max(text.chars().count());
        }
    }
    let mut out = String::new();
    for (index, line) in lines.iter().enumerate() {
        out.push('|');
        for (column, (text, width)) in line.iter().zip(widths).enumerate() {
            let pad = width - text.chars().count();
            // Numbers right-aligned, text left-aligned.
            if (2..=7).contains(&column) && column != 4 {
                let _ = write!(out, " {}{} |", " ".repeat(pad), text);
            } else {
                let _ = write!(out, " {}{} |", text, " ".repeat(pad));
            }
        }
        out.push('\n');
        if index == 0 {
            out.push('|');
            for (column, width) in widths.iter().enumerate() {
                let dashes = "-".repeat(*width);
                if (2..=7).contains(&column) && column != 4 {
                    let _ = write!(out, "-{dashes}:|");
                } else {
                    let _ = write!(out, " {dashes} |");
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The machine and its load, for the record.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!("cpus: {cpus}; cpu: {cpu}; kernel: {kernel}; {}", load())
}

/// The load averages (1, 5, 15 minutes).
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|avg| {
            let parts: Vec<&str> = avg.split_whitespace().take(3).collect();
            format!("load average: {}", parts.join(", "))
        })
        .unwrap_or_else(|_| "load average: unknown".to_owned())
}
