//! Case results, expected-failure lists and the report.
//!
//! Every case ends as [`Verdict::Pass`] or [`Verdict::Fail`] with a detail.
//! An expected-failures list (one case name per line, `#` comments) turns a
//! listed failure into `XFAIL`; a listed case that passes, or a listed name
//! that is no case of the suite, fails the run ("stale list"), so the list
//! can only shrink as an implementation improves.
//!
//! A reason may start with a key — `E7: …` (an erratum of SPEC.md §14),
//! `reference-sandbox: …` (a profile difference), or `[KEY] …` — which the
//! report uses to group the expected failures.
//!
//! Text report: one line per case, `PASS name`, `FAIL name: detail` or
//! `XFAIL name: detail`, then the totals per profile, the expected failures
//! per reason key, and a summary line last. JSON report (`--json`): one
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
    /// What the case binds (`protocol`, `reference-sandbox`).
    pub profile: String,
    /// For an expected failure: the key of its listed reason (`E7`,
    /// `reference-sandbox`, or `unclassified`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_key: Option<String>,
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
    /// The same counts per profile of the cases that ran.
    pub profiles: BTreeMap<String, ProfileCounts>,
    /// Expected failures per reason key (`E7`, `reference-sandbox`, …).
    pub expected_by_reason: BTreeMap<String, usize>,
}

/// Counts of one profile.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ProfileCounts {
    /// Cases of the profile that ran.
    pub total: usize,
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Expected failures.
    pub xfailed: usize,
}

/// The key of an expected-failure reason: `[KEY] …` gives KEY; `KEY: …`
/// gives KEY when KEY is one word; anything else is `unclassified`.
pub fn reason_key(reason: &str) -> String {
    let reason = reason.trim();
    if let Some(rest) = reason.strip_prefix('[')
        && let Some((key, _)) = rest.split_once(']')
        && !key.trim().is_empty()
    {
        return key.trim().to_owned();
    }
    match reason.split_once(':') {
        Some((key, _)) if !key.is_empty() && !key.contains(char::is_whitespace) => key.to_owned(),
        _ => "unclassified".to_owned(),
    }
}

/// Order reason keys naturally: `E2` before `E10`, errata before others.
fn reason_order(key: &str) -> (u8, u64, String) {
    match key.strip_prefix('E').and_then(|n| n.parse::<u64>().ok()) {
        Some(number) => (0, number, key.to_owned()),
        None => (1, 0, key.to_owned()),
    }
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
    profile: &str,
    verdict: Verdict,
    elapsed: Duration,
    expected: &ExpectedFailures,
) -> CaseReport {
    let listed = expected.contains(name);
    let mut reason_key_of_case = None;
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
            reason_key_of_case = Some(reason_key(reason));
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
        profile: profile.to_owned(),
        reason_key: reason_key_of_case,
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
        let mut counts = ProfileCounts::default();
        match case.status {
            Status::Pass => {
                summary.passed += 1;
                counts.passed = 1;
            }
            Status::Fail => {
                summary.failed += 1;
                counts.failed = 1;
            }
            Status::Xfail => {
                summary.xfailed += 1;
                counts.xfailed = 1;
                let key = case
                    .reason_key
                    .clone()
                    .unwrap_or_else(|| "unclassified".to_owned());
                *summary.expected_by_reason.entry(key).or_default() += 1;
            }
        }
        // Stale list entries are no case and have no profile.
        if !case.profile.is_empty() {
            let total = summary.profiles.entry(case.profile.clone()).or_default();
            total.total += 1;
            total.passed += counts.passed;
            total.failed += counts.failed;
            total.xfailed += counts.xfailed;
        }
    }
    summary
}

/// The lines printed before the summary line: totals per profile, then the
/// expected failures grouped by reason key.
pub fn breakdown_lines(summary: &Summary) -> Vec<String> {
    let mut lines: Vec<String> = summary
        .profiles
        .iter()
        .map(|(profile, counts)| {
            format!(
                "profile {profile}: {} cases, {} passed, {} failed, {} expected failures",
                counts.total, counts.passed, counts.failed, counts.xfailed
            )
        })
        .collect();
    if !summary.expected_by_reason.is_empty() {
        let mut keys: Vec<(&String, &usize)> = summary.expected_by_reason.iter().collect();
        keys.sort_by_key(|(key, _)| reason_order(key));
        let groups: Vec<String> = keys
            .iter()
            .map(|(key, count)| format!("{key} {count}"))
            .collect();
        lines.push(format!(
            "expected failures by reason (E = erratum of SPEC.md §14): {}",
            groups.join(", ")
        ));
    }
    lines
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
        let xfail = judge(
            "x",
            "§1",
            "protocol",
            Verdict::fail("boom"),
            Duration::ZERO,
            &list,
        );
        assert_eq!(xfail.status, Status::Xfail);
        assert_eq!(xfail.line(), "XFAIL x: boom [expected: known]");
        let stale = judge("y", "§1", "protocol", Verdict::Pass, Duration::ZERO, &list);
        assert_eq!(stale.status, Status::Fail);
        assert!(stale.line().contains("stale"));
        let plain = judge("z", "§1", "protocol", Verdict::Pass, Duration::ZERO, &list);
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
            judge("a", "", "protocol", Verdict::Pass, Duration::ZERO, &list),
            judge(
                "b",
                "",
                "reference-sandbox",
                Verdict::fail("no\nway"),
                Duration::ZERO,
                &list,
            ),
        ];
        assert_eq!(cases[1].line(), "FAIL b: no\\nway");
        let summary = summarize(&cases, 3, Duration::from_millis(1500));
        assert_eq!((summary.passed, summary.failed, summary.skipped), (1, 1, 3));
        assert!(!summary.success());
        assert!(summary_line("worker", &summary).ends_with("FAILED"));
        assert_eq!(summary.profiles["protocol"].passed, 1);
        assert_eq!(summary.profiles["reference-sandbox"].failed, 1);
    }

    #[test]
    fn reason_keys_and_the_grouped_breakdown() {
        assert_eq!(reason_key("E7: becomes a Lua error"), "E7");
        assert_eq!(reason_key("[E10] keeps serving"), "E10");
        assert_eq!(
            reason_key("reference-sandbox: no coroutines"),
            "reference-sandbox"
        );
        assert_eq!(reason_key("exits 0"), "unclassified");
        assert_eq!(reason_key("some words: more"), "unclassified");
        let list = ExpectedFailures::parse(
            "a # E10: x\nb # E2: y\nc # reference-sandbox: z\nd # E10: w\n",
        )
        .unwrap();
        let cases: Vec<CaseReport> = ["a", "b", "c", "d"]
            .iter()
            .map(|name| {
                judge(
                    name,
                    "",
                    "protocol",
                    Verdict::fail("f"),
                    Duration::ZERO,
                    &list,
                )
            })
            .collect();
        let summary = summarize(&cases, 0, Duration::ZERO);
        assert!(summary.success());
        let lines = breakdown_lines(&summary);
        assert_eq!(
            lines[0],
            "profile protocol: 4 cases, 0 passed, 0 failed, 4 expected failures"
        );
        assert_eq!(
            lines[1],
            "expected failures by reason (E = erratum of SPEC.md §14): E2 1, E10 2, reference-sandbox 1"
        );
    }
}
