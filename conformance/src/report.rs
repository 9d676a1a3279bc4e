//! Case results, expected-failure lists and the report.
//!
//! Every case ends as [`Verdict::Pass`] or [`Verdict::Fail`] with a detail.
//! An expected-failures list (one case name per line, `#` comments) turns a
//! listed failure into `XFAIL`; a listed case that passes, or a listed name
//! that is no case of the suite, fails the run ("stale list"), so the list
//! can only shrink as an implementation improves.
//!
//! Text report: one line per case, `PASS name`, `FAIL name: detail` or
//! `XFAIL name: detail`, then a summary line. JSON report (`--json`): one
//! object with `suite`, `cases` and `summary`.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::Duration;

/// What a case concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The implementation did what the MUST requires.
    Pass,
    /// It did not; the text says what was observed.
    Fail(String),
}

impl Verdict {
    /// A failure with a detail.
    pub fn fail(detail: impl Into<String>) -> Self {
        Self::Fail(detail.into())
    }
}

/// Status of a case in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Passed.
    Pass,
    /// Failed (and not expected to), or listed as expected to fail but passed.
    Fail,
    /// Failed as the expected-failures list says it would.
    Xfail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Xfail => "XFAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    /// Case name (`category.what_must_hold`).
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// What was observed (empty for a plain pass).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// SPEC.md section the case checks.
    pub spec: String,
    /// Wall time the case took, in milliseconds.
    pub millis: u64,
}

impl CaseReport {
    /// The text line for this case.
    pub fn line(&self) -> String {
        if self.detail.is_empty() {
            format!("{} {}", self.status.label(), self.name)
        } else {
            format!(
                "{} {}: {}",
                self.status.label(),
                self.name,
                one_line(&self.detail)
            )
        }
    }
}

/// Counts over a whole run.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Cases that ran.
    pub total: usize,
    /// Passed.
    pub passed: usize,
    /// Failed, stale list entries included.
    pub failed: usize,
    /// Expected failures.
    pub xfailed: usize,
    /// Cases not run (`--filter`, `--protocol-only`).
    pub skipped: usize,
    /// Wall time of the run, milliseconds.
    pub millis: u64,
}

impl Summary {
    /// Whether the run passes: nothing failed.
    pub fn success(&self) -> bool {
        self.failed == 0
    }
}

/// An expected-failures list: case name → reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedFailures {
    entries: BTreeMap<String, String>,
}

impl ExpectedFailures {
    /// Parse the list format: one case name per line; `#` starts a comment
    /// (a comment after a name is its reason); blank lines are ignored.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let (name, reason) = match line.split_once('#') {
                Some((name, reason)) => (name.trim(), reason.trim()),
                None => (line.trim(), ""),
            };
            if name.is_empty() {
                continue;
            }
            if name.split_whitespace().count() != 1 {
                return Err(format!(
                    "line {}: expected one case name, found `{name}`",
                    number + 1
                ));
            }
            if entries.insert(name.to_owned(), reason.to_owned()).is_some() {
                return Err(format!("line {}: `{name}` is listed twice", number + 1));
            }
        }
        Ok(Self { entries })
    }

    /// Read and parse a list file.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        Self::parse(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Whether `name` is listed.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The reason given for `name`.
    pub fn reason(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(String::as_str)
    }

    /// Listed names that are not in `known`.
    pub fn unknown<'a>(&'a self, known: &BTreeSet<&str>) -> Vec<&'a str> {
        self.entries
            .keys()
            .map(String::as_str)
            .filter(|name| !known.contains(name))
            .collect()
    }
}

/// Turn a verdict into a report line, applying the expected-failures list.
pub fn judge(
    name: &str,
    spec: &str,
    verdict: Verdict,
    elapsed: Duration,
    expected: &ExpectedFailures,
) -> CaseReport {
    let listed = expected.contains(name);
    let (status, detail) = match (verdict, listed) {
        (Verdict::Pass, false) => (Status::Pass, String::new()),
        (Verdict::Pass, true) => (
            Status::Fail,
            "listed in the expected failures but passed: remove it from the list (stale list)"
                .to_owned(),
        ),
        (Verdict::Fail(detail), false) => (Status::Fail, detail),
        (Verdict::Fail(detail), true) => {
            let reason = expected.reason(name).unwrap_or_default();
            if reason.is_empty() {
                (Status::Xfail, detail)
            } else {
                (Status::Xfail, format!("{detail} [expected: {reason}]"))
            }
        }
    };
    CaseReport {
        name: name.to_owned(),
        status,
        detail,
        spec: spec.to_owned(),
        millis: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Add up a run.
pub fn summarize(cases: &[CaseReport], skipped: usize, elapsed: Duration) -> Summary {
    let mut summary = Summary {
        total: cases.len(),
        skipped,
        millis: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        ..Summary::default()
    };
    for case in cases {
        match case.status {
            Status::Pass => summary.passed += 1,
            Status::Fail => summary.failed += 1,
            Status::Xfail => summary.xfailed += 1,
        }
    }
    summary
}

/// The summary line of the text report.
pub fn summary_line(suite: &str, summary: &Summary) -> String {
    format!(
        "{suite} suite: {} cases, {} passed, {} failed, {} expected failures, {} skipped in {:.1} s: {}",
        summary.total,
        summary.passed,
        summary.failed,
        summary.xfailed,
        summary.skipped,
        Duration::from_millis(summary.millis).as_secs_f64(),
        if summary.success() { "OK" } else { "FAILED" }
    )
}

/// The whole JSON report.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// `worker` or `parent`.
    pub suite: &'a str,
    /// The command under test.
    pub command: &'a [String],
    /// Every case, in suite order.
    pub cases: &'a [CaseReport],
    /// Counts.
    pub summary: &'a Summary,
}

/// Write the JSON report as one line.
pub fn write_json<W: Write>(mut out: W, report: &JsonReport<'_>) -> io::Result<()> {
    serde_json::to_writer(&mut out, report).map_err(io::Error::other)?;
    writeln!(out)?;
    out.flush()
}

/// Escape control characters so that a detail stays on one line.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn parses_names_comments_and_reasons() {
        let list = ExpectedFailures::parse(
            "# a comment line\n\nworker.a # not yet\n  worker.b  \nworker.c#why\n",
        )
        .unwrap();
        assert!(list.contains("worker.a"));
        assert_eq!(list.reason("worker.a"), Some("not yet"));
        assert_eq!(list.reason("worker.b"), Some(""));
        assert_eq!(list.reason("worker.c"), Some("why"));
        assert!(!list.contains("# a comment line"));
    }

    #[test]
    fn rejects_two_names_on_a_line_and_repeats() {
        assert!(ExpectedFailures::parse("a b\n").is_err());
        assert!(ExpectedFailures::parse("a\na # again\n").is_err());
    }

    #[test]
    fn listed_failure_is_xfail_and_listed_pass_is_stale() {
        let list = ExpectedFailures::parse("x # known\ny\n").unwrap();
        let xfail = judge("x", "§1", Verdict::fail("boom"), Duration::ZERO, &list);
        assert_eq!(xfail.status, Status::Xfail);
        assert_eq!(xfail.line(), "XFAIL x: boom [expected: known]");
        let stale = judge("y", "§1", Verdict::Pass, Duration::ZERO, &list);
        assert_eq!(stale.status, Status::Fail);
        assert!(stale.line().contains("stale"));
        let plain = judge("z", "§1", Verdict::Pass, Duration::ZERO, &list);
        assert_eq!(plain.line(), "PASS z");
    }

    #[test]
    fn unknown_names_are_found() {
        let list = ExpectedFailures::parse("a\nb\n").unwrap();
        let known: BTreeSet<&str> = ["a"].into_iter().collect();
        assert_eq!(list.unknown(&known), vec!["b"]);
    }

    #[test]
    fn summary_fails_on_any_failure() {
        let list = ExpectedFailures::default();
        let cases = vec![
            judge("a", "", Verdict::Pass, Duration::ZERO, &list),
            judge("b", "", Verdict::fail("no\nway"), Duration::ZERO, &list),
        ];
        assert_eq!(cases[1].line(), "FAIL b: no\\nway");
        let summary = summarize(&cases, 3, Duration::from_millis(1500));
        assert_eq!((summary.passed, summary.failed, summary.skipped), (1, 1, 3));
        assert!(!summary.success());
        assert!(summary_line("worker", &summary).ends_with("FAILED"));
    }
}
