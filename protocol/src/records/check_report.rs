//! The `check` report (SPEC §7.1, §7.2): what a worker found in a source it
//! compiled, sent as the `check` result instead of `null` when
//! `initialize` granted [`CHECK_DIAGNOSTICS_GRANT`].
//!
//! Quirl 0.1 answers `check` with `null` or an error response, and so does
//! a worker that was not granted the capability: the report is negotiated,
//! never assumed. A parent that granted it still accepts `null` (a worker
//! that does not know the capability ignores it, SPEC §7.1). A report
//! without the grant is `wrong_type` (the session machine checks it,
//! [`crate::session`]); the codec itself accepts `null` or a report.
//!
//! A report is a result record: its members are sorted by key, the error
//! records inside it too (SPEC §6.2).

use super::ShellError;
use crate::error::ProtocolError;
use crate::json::Validate;
use crate::json::{decode_record, string_enum};
use crate::limits::DIAGNOSTICS_MAX;
use serde::Serialize;

/// The worker capability (a grant string of `initialize`, SPEC §7.1) that
/// makes `check` answer with a [`CheckReport`] instead of `null`.
pub const CHECK_DIAGNOSTICS_GRANT: &str = "check.diagnostics";

/// Longest rule name of a [`CheckDiagnostic`], in bytes.
pub const CHECK_RULE_BYTES_MAX: usize = 64;

/// Whether a finding makes the source wrong or only suspicious.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The source fails (or is certainly wrong) where this is reached.
    Error,
    /// Suspicious, but the source may be right.
    Warning,
}

string_enum!(Severity "severity" {
    "error" => Error,
    "warning" => Warning,
});

/// One finding of `check`: an error record (code, message, labels, help)
/// with the rule that found it and its severity.
///
/// A label whose `source` is `null` points into the `source` of the
/// `check` request (byte offsets, `start <= end`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckDiagnostic {
    /// What was found, where, and how to fix it.
    pub record: ShellError,
    /// The rule that found it: a snake_case name (`undefined_global`, …)
    /// of at most [`CHECK_RULE_BYTES_MAX`] bytes.
    pub rule: String,
    /// Error or warning.
    pub severity: Severity,
}

decode_record!(CheckDiagnostic "check diagnostic" {
    record: req,
    rule: req,
    severity: req,
});

/// A snake_case name: ASCII lowercase letters, digits and `_`, starting
/// with a letter.
fn is_rule_name(rule: &str) -> bool {
    rule.len() <= CHECK_RULE_BYTES_MAX
        && rule.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && rule
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl Validate for CheckDiagnostic {
    fn validate(&self) -> Result<(), ProtocolError> {
        if !is_rule_name(&self.rule) {
            return Err(ProtocolError::domain(format!(
                "rule `{}` is not a snake_case name of 1 to {CHECK_RULE_BYTES_MAX} bytes",
                self.rule.escape_debug()
            ))
            .at("rule"));
        }
        Ok(())
    }
}

/// The result of `check` under [`CHECK_DIAGNOSTICS_GRANT`]: at most
/// [`DIAGNOSTICS_MAX`] findings, in the worker's order (the reference
/// worker sends errors first, each severity in source order, so that a
/// report cut to the limit keeps the errors).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// The findings.
    pub diagnostics: Vec<CheckDiagnostic>,
}

decode_record!(CheckReport "check report" {
    diagnostics: req,
});

impl Validate for CheckReport {
    fn validate(&self) -> Result<(), ProtocolError> {
        if self.diagnostics.len() > DIAGNOSTICS_MAX {
            return Err(ProtocolError::domain(format!(
                "{} check diagnostics; at most {DIAGNOSTICS_MAX} are allowed",
                self.diagnostics.len()
            ))
            .at("diagnostics"));
        }
        Ok(())
    }
}

impl CheckReport {
    /// Whether any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|diagnostic| diagnostic.severity == Severity::Error)
    }
}
