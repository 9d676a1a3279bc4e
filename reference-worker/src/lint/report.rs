//! Findings in the protocol's shapes (SPEC §7.2): the check report a
//! parent negotiated with `check.diagnostics`, or, for a parent that did
//! not (Quirl 0.1's wire), one `validation` error record for the errors.

use super::{Finding, LineIndex, Rule, Severity, Span};
use crate::diag::Chunk;
use crate::error::{LABEL_SOURCE_BYTES_MAX, Label, OpError};
use quirl_lua_protocol::limits::DIAGNOSTICS_MAX;
use quirl_lua_protocol::records::{CheckDiagnostic, CheckReport, ErrorCode, ShellError};

fn record(finding: &Finding) -> ShellError {
    let mut record = ShellError::new(ErrorCode::Validation, finding.message.clone());
    record.labels.push(Label {
        source: None,
        start: u32::try_from(finding.span.start).unwrap_or(u32::MAX),
        end: u32::try_from(finding.span.end).unwrap_or(u32::MAX),
        message: finding.label.clone(),
    });
    record.help.clone_from(&finding.help);
    record
}

/// The report of `findings` (sorted as `super::lint` sorts them): each a
/// `validation` record whose one label points into the checked source
/// (`source: null`, byte offsets). At most [`DIAGNOSTICS_MAX`]: a longer
/// list keeps the first ones and ends with a `more_findings` warning.
pub fn check_report(findings: &[Finding]) -> CheckReport {
    let mut diagnostics: Vec<CheckDiagnostic> = Vec::new();
    let fits = if findings.len() > DIAGNOSTICS_MAX {
        DIAGNOSTICS_MAX - 1
    } else {
        findings.len()
    };
    for finding in &findings[..fits] {
        diagnostics.push(CheckDiagnostic {
            record: record(finding),
            rule: finding.rule.as_str().to_owned(),
            severity: finding.severity,
        });
    }
    if fits < findings.len() {
        let rest = &findings[fits..];
        let errors = rest
            .iter()
            .filter(|finding| finding.severity == Severity::Error)
            .count();
        let more = Finding {
            rule: Rule::MoreFindings,
            severity: Severity::Warning,
            span: Span { start: 0, end: 0 },
            message: format!(
                "{} more findings ({errors} errors, {} warnings) are not listed",
                rest.len(),
                rest.len() - errors
            ),
            label: "not listed".to_owned(),
            help: vec![format!(
                "a report lists at most {DIAGNOSTICS_MAX}: fix these and check again"
            )],
        };
        diagnostics.push(CheckDiagnostic {
            record: record(&more),
            rule: more.rule.as_str().to_owned(),
            severity: more.severity,
        });
    }
    CheckReport { diagnostics }
}

/// For a parent that did not negotiate a report: the errors of `findings`
/// as one `validation` error, or `None` without errors (warnings are not
/// sent, as Quirl 0.1's `check` sends none). One label per error, as the
/// worker labels every guest failure (DESIGN §15.11): the chunk's text as
/// `source` when it is at most 64 KiB, the error's position in the
/// context.
pub fn check_error(findings: &[Finding], chunk: &Chunk) -> Option<OpError> {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|finding| finding.severity == Severity::Error)
        .collect();
    let first = errors.first()?;
    let message = match errors.len() {
        1 => first.message.clone(),
        n => format!("{} (and {} more errors)", first.message, n - 1),
    };
    let lines = LineIndex::new(&chunk.text);
    let with_source = chunk.text.len() <= LABEL_SOURCE_BYTES_MAX;
    let mut error = OpError::validation(message);
    for finding in &errors {
        let (line, column) = lines.line_column(finding.span.start);
        error = error
            .with_label(Label {
                source: with_source.then(|| chunk.text.clone()),
                start: u32::try_from(finding.span.start).unwrap_or(u32::MAX),
                end: u32::try_from(finding.span.end).unwrap_or(u32::MAX),
                message: format!("{}: {}", finding.rule.as_str(), finding.message),
            })
            .with_context(format!(
                "check: {} at {}:{line}:{column}",
                finding.rule.as_str(),
                chunk.name
            ));
        for help in &finding.help {
            if !error.help.contains(help) {
                error = error.with_help(help.clone());
            }
        }
    }
    Some(error.bounded())
}
