//! `quirl-lua check FILE`: compile and lint a file without running it, and
//! print what the worker found as a compiler does.
//!
//! The worker is asked for the check report (`initialize` grants
//! `check.diagnostics` besides the grants given, or Quirl's defaults; SPEC
//! §7.1, §7.2). Each finding is printed on stderr with its position, the
//! source line and a caret:
//!
//! ```text
//! error[undefined_global]: `prnt` is not defined
//!  --> issue.lua:5:1
//!   |
//! 5 | prnt(f(1))
//!   | ^^^^ called here, but nothing defines `prnt`
//!   |
//!   = help: did you mean `print`? …
//! ```
//!
//! then a summary line. Exit status 1 when any finding is an error, 0 when
//! there are only warnings (stdout then says `null`, the `check` result of
//! Quirl 0.1's wire). `--json` prints the report as the result record
//! instead (`{"ok":true,"result":{"diagnostics":[…]}}`), with the same exit
//! status. A worker that answers without a report (one that does not know
//! the capability) is printed as before: `null`, or its error. A source
//! Lua does not compile is printed the same way, at the line Lua names.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use quirl_lua_protocol::records::{
    CHECK_DIAGNOSTICS_GRANT, CheckReport, Operation, OperationResult, Severity, ShellError,
};
use quirl_lua_reference_parent::{Error, ErrorClass, Worker, WorkerConfig};
use serde_json::Value;

use super::args::GlobalOptions;
use super::{EXIT_GUEST, EXIT_OK, EXIT_WORKER, Failure, exit_code, read_source, render};

/// The grants `check` initializes its worker with: those given (or
/// Quirl's defaults for the policy), and the report capability.
pub(crate) fn grants(options: &GlobalOptions) -> Vec<String> {
    let mut grants: Vec<String> = if options.grants.is_empty() {
        quirl_lua_reference_worker::sandbox::grants::default_grants(options.allow_process)
            .into_iter()
            .collect()
    } else {
        options.grants.clone()
    };
    grants.push(CHECK_DIAGNOSTICS_GRANT.to_owned());
    grants.sort();
    grants.dedup();
    grants
}

/// Check `file` and print the findings; the exit status is the error's.
pub(crate) fn run(config: WorkerConfig, file: &Path, json: bool) -> Result<(), Failure> {
    let source = read_source(file)?;
    let name = file.display().to_string();
    let mut worker = Worker::spawn(config)?;
    let result = worker.call(
        Operation::Check {
            source: source.clone(),
            source_name: name.clone(),
        },
        None,
    );
    let result = match result {
        Ok(result) => result,
        Err(error) if !json && error.class() == ErrorClass::Guest => {
            // A compile error (or Quirl 0.1's lint error): at its line.
            let mut text = String::new();
            render_error(&mut text, &name, &source, &error);
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
            return Err(Failure::Silent(exit_code(&error)));
        }
        Err(error) => return Err(Failure::Worker(error)),
    };
    let report = match result {
        OperationResult::CheckReport(report) => report,
        OperationResult::Null => {
            render::print_result(&Value::Null, json);
            return Ok(());
        }
        // Unreachable: the session decodes each result for the operation
        // in flight (a typed exit rather than a panic).
        other => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "error[validation]: the worker answered check with another operation's result: {other:?}"
            );
            return Err(Failure::Silent(EXIT_WORKER));
        }
    };
    let status = if report.has_errors() {
        EXIT_GUEST
    } else {
        EXIT_OK
    };
    if json {
        let value = OperationResult::CheckReport(report)
            .to_value()
            .map_err(|error| Failure::Usage(format!("cannot print the report: {error}")))?;
        render::print_result(&value, true);
    } else {
        let text = render_report(&name, &source, &report);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        if status == EXIT_OK {
            render::print_result(&Value::Null, false);
        }
    }
    if status == EXIT_OK {
        Ok(())
    } else {
        Err(Failure::Silent(status))
    }
}

/// Every finding of `report` on the source `source` of the file `name`,
/// then a summary line; empty for an empty report.
pub(crate) fn render_report(name: &str, source: &str, report: &CheckReport) -> String {
    let mut text = String::new();
    if report.diagnostics.is_empty() {
        return text;
    }
    let lines = Lines::new(source);
    let width = report
        .diagnostics
        .iter()
        .filter_map(|diagnostic| diagnostic.record.labels.first())
        .map(|label| lines.position(label.start as usize).0.to_string().len())
        .max()
        .unwrap_or(1);
    for diagnostic in &report.diagnostics {
        let severity = match diagnostic.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let record = &diagnostic.record;
        let _ = writeln!(text, "{severity}[{}]: {}", diagnostic.rule, record.message);
        match record.labels.first() {
            Some(label) if label.end > 0 => {
                snippet(
                    &mut text,
                    name,
                    &lines,
                    width,
                    label.start,
                    label.end,
                    &label.message,
                );
            }
            _ => {
                let _ = writeln!(text, "{:width$}--> {name}", "");
            }
        }
        for help in &record.help {
            let _ = writeln!(text, "{:width$} = help: {help}", "");
        }
        text.push('\n');
    }
    let errors = report
        .diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.severity == Severity::Error)
        .count();
    let warnings = report.diagnostics.len() - errors;
    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    let _ = writeln!(
        text,
        "{name}: {}, {}",
        plural(errors, "error"),
        plural(warnings, "warning")
    );
    text
}

/// A guest error of `check` (Lua's compile error, or the `validation`
/// error of a worker without reports): its code and message, each label
/// at its line of the file, context and help.
fn render_error(text: &mut String, name: &str, source: &str, error: &Error) {
    let record: &ShellError = error.record();
    let lines = Lines::new(source);
    let _ = writeln!(text, "error[{}]: {}", record.code, record.message);
    let mut located = false;
    for label in &record.labels {
        // A label points into this file when it carries its text (the
        // reference worker's labels) or no text at all.
        if label.source.as_deref().is_none_or(|text| text == source) && label.end > 0 {
            let width = lines.position(label.start as usize).0.to_string().len();
            snippet(
                text,
                name,
                &lines,
                width,
                label.start,
                label.end,
                &label.message,
            );
            located = true;
        }
    }
    if !located {
        let _ = writeln!(text, " --> {name}");
    }
    for context in &record.context {
        let _ = writeln!(text, "  = context: {context}");
    }
    for help in &record.help {
        let _ = writeln!(text, "  = help: {help}");
    }
}

/// ` --> name:line:column`, the source line and a caret under the span.
fn snippet(
    text: &mut String,
    name: &str,
    lines: &Lines<'_>,
    width: usize,
    start: u32,
    end: u32,
    message: &str,
) {
    let (line, column, line_text) = lines.position(start as usize);
    let pad = "";
    let _ = writeln!(text, "{pad:width$}--> {name}:{line}:{column}");
    let _ = writeln!(text, "{pad:width$} |");
    let _ = writeln!(text, "{line:>width$} | {line_text}");
    // The caret keeps the line's tabs, so it stands under the span.
    let before: String = line_text
        .chars()
        .take(column - 1)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let span_chars = lines
        .text(start as usize, end as usize)
        .chars()
        .take_while(|&c| c != '\n')
        .count()
        .max(1);
    let _ = writeln!(
        text,
        "{pad:width$} | {before}{} {message}",
        "^".repeat(span_chars)
    );
    let _ = writeln!(text, "{pad:width$} |");
}

/// Lines of a source: positions of byte offsets (1-based line, 1-based
/// column in characters) and the text of each line.
struct Lines<'a> {
    source: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(source: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            source
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(at, _)| at + 1),
        );
        Self { source, starts }
    }

    /// The text of `start..end`, or nothing when it is not on character
    /// boundaries of the source.
    fn text(&self, start: usize, end: usize) -> &'a str {
        self.source
            .get(start..end.min(self.source.len()))
            .unwrap_or("")
    }

    /// Line, column and the line's text (without its line break) of `offset`.
    fn position(&self, offset: usize) -> (usize, usize, &'a str) {
        let mut offset = offset.min(self.source.len());
        while !self.source.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line.saturating_sub(1)];
        let end = self.source[start..]
            .find('\n')
            .map_or(self.source.len(), |at| start + at);
        let line_text = self.source[start..end].trim_end_matches('\r');
        let column = self.source[start..offset].chars().count() + 1;
        (line, column, line_text)
    }
}
