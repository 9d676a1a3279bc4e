//! Running a suite: parallel workers over the case list, ordered output,
//! the expected-failures list and the summary.

use crate::profile::Profile;
use crate::report::{
    self, CaseReport, ExpectedFailures, JsonReport, Status, Summary, Verdict, judge,
};
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A case of a suite.
pub trait Case: Sync {
    /// Unique name, `category.what_must_hold`.
    fn name(&self) -> &str;
    /// The SPEC.md section it checks.
    fn spec(&self) -> &str;
    /// Tags (`sdk` marks cases that depend on the Quirl Lua SDK).
    fn tags(&self) -> &[String];
    /// What the case binds (SPEC.md §19).
    fn profile(&self) -> Profile {
        Profile::Protocol
    }
    /// Whether `--protocol-only` runs it: by default every case not tagged
    /// `sdk` (the worker suite narrows this to Lua-free `protocol` cases).
    fn protocol_only(&self) -> bool {
        !self.tags().iter().any(|tag| tag == "sdk")
    }
    /// Run the case against the implementation under test.
    fn run(&self) -> Verdict;
}

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `worker` or `parent`.
    pub suite: String,
    /// The command under test, for the JSON report.
    pub command: Vec<String>,
    /// Cases run at once.
    pub jobs: usize,
    /// Only cases whose name contains this.
    pub filter: Option<String>,
    /// Run only the cases a protocol-only implementation must pass
    /// ([`Case::protocol_only`]).
    pub protocol_only: bool,
    /// Known failures.
    pub expected: ExpectedFailures,
    /// Print the JSON report instead of text lines.
    pub json: bool,
}

/// Run `cases`, print the report to `out`, return the summary.
pub fn run_suite<C: Case, W: Write + Send>(
    cases: &[C],
    options: &RunOptions,
    out: W,
) -> std::io::Result<Summary> {
    let started = Instant::now();
    let selected: Vec<&C> = cases
        .iter()
        .filter(|case| {
            options
                .filter
                .as_deref()
                .is_none_or(|filter| case.name().contains(filter))
        })
        .filter(|case| !options.protocol_only || case.protocol_only())
        .collect();
    let skipped = cases.len() - selected.len();
    let printer = Mutex::new(Printer {
        out,
        next: 0,
        pending: vec![None; selected.len()],
        json: options.json,
        error: None,
    });
    run_in_parallel(&selected, options, &printer);
    let mut printer = printer
        .into_inner()
        .map_err(|_| std::io::Error::other("report printer poisoned"))?;
    let mut reports: Vec<CaseReport> = printer.pending.drain(..).flatten().collect();
    // A listed name that is no case of the suite is a stale entry.
    let known: BTreeSet<&str> = cases.iter().map(Case::name).collect();
    for name in options.expected.unknown(&known) {
        let line = CaseReport {
            name: name.to_owned(),
            status: Status::Fail,
            detail: "listed in the expected failures but no such case (stale list)".to_owned(),
            spec: String::new(),
            profile: String::new(),
            reason_key: None,
            millis: 0,
        };
        if !options.json {
            writeln!(printer.out, "{}", line.line())?;
        }
        reports.push(line);
    }
    if let Some(error) = printer.error.take() {
        return Err(error);
    }
    let summary = report::summarize(&reports, skipped, started.elapsed());
    write_report(&mut printer.out, options, &reports, &summary)?;
    Ok(summary)
}

/// Run the selected cases on `options.jobs` threads (at most 64), each
/// taking the next case in turn; the printer puts the lines back in order.
fn run_in_parallel<C: Case, W: Write + Send>(
    selected: &[&C],
    options: &RunOptions,
    printer: &Mutex<Printer<W>>,
) {
    let cursor = AtomicUsize::new(0);
    let jobs = options.jobs.clamp(1, 64);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let index = cursor.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = selected.get(index) else {
                        return;
                    };
                    let begun = Instant::now();
                    let verdict = run_guarded(*case);
                    let line = judge(
                        case.name(),
                        case.spec(),
                        case.profile().as_str(),
                        verdict,
                        begun.elapsed(),
                        &options.expected,
                    );
                    if let Ok(mut printer) = printer.lock() {
                        printer.add(index, line);
                    }
                }
            });
        }
    });
}

/// After the case lines: the JSON report, or the breakdown and summary lines.
fn write_report<W: Write>(
    out: &mut W,
    options: &RunOptions,
    reports: &[CaseReport],
    summary: &Summary,
) -> std::io::Result<()> {
    if options.json {
        report::write_json(
            out,
            &JsonReport {
                suite: &options.suite,
                command: &options.command,
                cases: reports,
                summary,
            },
        )?;
    } else {
        for line in report::breakdown_lines(summary) {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "{}", report::summary_line(&options.suite, summary))?;
        out.flush()?;
    }
    Ok(())
}

/// Run a case; a panic inside the runner is reported as a failure of the case.
fn run_guarded<C: Case>(case: &C) -> Verdict {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case.run())) {
        Ok(verdict) => verdict,
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Verdict::fail(format!("the runner itself failed: {text}"))
        }
    }
}

struct Printer<W: Write> {
    out: W,
    next: usize,
    pending: Vec<Option<CaseReport>>,
    json: bool,
    error: Option<std::io::Error>,
}

impl<W: Write> Printer<W> {
    /// Record a finished case and print every line that is now in order.
    fn add(&mut self, index: usize, line: CaseReport) {
        if let Some(slot) = self.pending.get_mut(index) {
            *slot = Some(line);
        }
        if self.json {
            return;
        }
        while let Some(Some(line)) = self.pending.get(self.next) {
            let text = line.line();
            if let Err(error) = writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
                self.error.get_or_insert(error);
            }
            self.next += 1;
        }
    }
}

/// Default parallelism: the machine's cores, at least 2.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(std::num::NonZeroUsize::get)
        .unwrap_or(2)
        .max(2)
}

/// A generous default bound for a case step.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    struct Fixed {
        name: String,
        pass: bool,
        tags: Vec<String>,
    }

    impl Case for Fixed {
        fn name(&self) -> &str {
            &self.name
        }
        fn spec(&self) -> &str {
            "§0"
        }
        fn tags(&self) -> &[String] {
            &self.tags
        }
        fn run(&self) -> Verdict {
            if self.pass {
                Verdict::Pass
            } else {
                Verdict::fail("nope")
            }
        }
    }

    fn case(name: &str, pass: bool, sdk: bool) -> Fixed {
        Fixed {
            name: name.to_owned(),
            pass,
            tags: if sdk { vec!["sdk".to_owned()] } else { vec![] },
        }
    }

    fn options(expected: &str) -> RunOptions {
        RunOptions {
            suite: "test".to_owned(),
            command: vec![],
            jobs: 3,
            filter: None,
            protocol_only: false,
            expected: ExpectedFailures::parse(expected).unwrap(),
            json: false,
        }
    }

    #[test]
    fn prints_lines_in_case_order_and_a_summary() {
        let cases: Vec<Fixed> = (0..20)
            .map(|i| case(&format!("c.{i:02}"), i != 7, false))
            .collect();
        let mut out = Vec::new();
        let summary = run_suite(&cases, &options(""), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 22);
        assert_eq!(
            lines[20],
            "profile protocol: 20 cases, 19 passed, 1 failed, 0 expected failures"
        );
        assert_eq!(lines[0], "PASS c.00");
        assert_eq!(lines[7], "FAIL c.07: nope");
        assert!(lines[21].starts_with("test suite: 20 cases, 19 passed, 1 failed"));
        assert!(!summary.success());
    }

    #[test]
    fn expected_failures_pass_the_run_and_stale_entries_fail_it() {
        let cases = vec![case("a", false, false), case("b", true, false)];
        let summary = run_suite(&cases, &options("a # known"), Vec::new()).unwrap();
        assert!(summary.success());
        assert_eq!(summary.xfailed, 1);
        let summary = run_suite(&cases, &options("a\nb"), Vec::new()).unwrap();
        assert!(!summary.success());
        let summary = run_suite(&cases, &options("a\nzzz"), Vec::new()).unwrap();
        assert_eq!(summary.failed, 1);
    }

    #[test]
    fn filter_and_protocol_only_skip_cases() {
        let cases = vec![
            case("x.one", true, false),
            case("y.two", false, false),
            case("x.sdk", false, true),
        ];
        let mut opts = options("");
        opts.filter = Some("x.".to_owned());
        opts.protocol_only = true;
        let summary = run_suite(&cases, &opts, Vec::new()).unwrap();
        assert_eq!((summary.total, summary.skipped, summary.failed), (1, 2, 0));
    }

    #[test]
    fn json_report_is_one_document() {
        let cases = vec![case("a", true, false)];
        let mut opts = options("");
        opts.json = true;
        let mut out = Vec::new();
        run_suite(&cases, &opts, &mut out).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["cases"][0]["status"], "pass");
        assert_eq!(value["summary"]["passed"], 1);
    }
}
