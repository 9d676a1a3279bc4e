//! The worker suite: the runner plays a (hostile) parent against any worker
//! command, one fresh worker process per case.
//!
//! Cases come from the data files under `conformance/cases/` (embedded in
//! the binary) and from the golden fixtures' manifest. Each case spawns the
//! worker in a process group of its own, plays its steps with a bound on
//! every wait, checks the global rules (nothing on stdout, every frame
//! valid and canonical, no process started by the worker), then kills the
//! group and reaps the worker.

pub mod conn;
pub mod fixtures;
pub mod script;

use crate::exec::Case;
use crate::report::Verdict;
use script::{CaseData, CaseFile, Interpreter, Step};
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

/// The worker case files, embedded: (file name, contents).
pub const CASE_FILES: [(&str, &str); 6] = [
    (
        "worker-session.json",
        include_str!("../../cases/worker-session.json"),
    ),
    (
        "worker-operations.json",
        include_str!("../../cases/worker-operations.json"),
    ),
    (
        "worker-host-calls.json",
        include_str!("../../cases/worker-host-calls.json"),
    ),
    (
        "worker-sandbox.json",
        include_str!("../../cases/worker-sandbox.json"),
    ),
    (
        "worker-library.json",
        include_str!("../../cases/worker-library.json"),
    ),
    (
        "worker-patterns.json",
        include_str!("../../cases/worker-patterns.json"),
    ),
];

/// One worker case, ready to run.
pub struct WorkerCase {
    data: CaseData,
    steps: Result<Vec<Step>, String>,
    command: Arc<Vec<OsString>>,
}

impl WorkerCase {
    /// The case's data.
    pub fn data(&self) -> &CaseData {
        &self.data
    }
}

impl Case for WorkerCase {
    fn name(&self) -> &str {
        &self.data.name
    }
    fn spec(&self) -> &str {
        &self.data.spec
    }
    fn tags(&self) -> &[String] {
        &self.data.tags
    }
    fn run(&self) -> Verdict {
        let steps = match &self.steps {
            Ok(steps) => steps,
            Err(error) => return Verdict::fail(format!("invalid case: {error}")),
        };
        match Interpreter::start(&self.data, &self.command) {
            Ok(interpreter) => interpreter.run(steps),
            Err(error) => Verdict::fail(error),
        }
    }
}

/// Parse one case file.
pub fn parse_case_file(name: &str, text: &str) -> Result<Vec<CaseData>, String> {
    let file: CaseFile = serde_json::from_str(text).map_err(|error| format!("{name}: {error}"))?;
    Ok(file
        .cases
        .into_iter()
        .map(|case| case.with_defaults(&file.defaults))
        .collect())
}

/// Every case of the data files, in file order.
pub fn data_cases() -> Result<Vec<CaseData>, String> {
    let mut out = Vec::new();
    for (name, text) in CASE_FILES {
        out.extend(parse_case_file(name, text)?);
    }
    Ok(out)
}

/// Build the whole suite for `command`.
pub fn suite(command: Vec<OsString>, fixtures_dir: &Path) -> Result<Vec<WorkerCase>, String> {
    let command = Arc::new(command);
    let mut all = data_cases()?;
    all.extend(fixtures::cases(fixtures_dir)?);
    let mut seen = std::collections::BTreeSet::new();
    for case in &all {
        if !seen.insert(case.name.clone()) {
            return Err(format!("two cases are named {}", case.name));
        }
    }
    Ok(all
        .into_iter()
        .map(|data| WorkerCase {
            steps: data.expanded_steps(),
            data,
            command: Arc::clone(&command),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_data_case_parses_and_expands() {
        let cases = data_cases().unwrap();
        assert!(!cases.is_empty());
        for case in &cases {
            case.expanded_steps()
                .unwrap_or_else(|error| panic!("{}: {error}", case.name));
            assert!(
                case.spec.starts_with('§'),
                "{}: spec {}",
                case.name,
                case.spec
            );
            assert!(!case.must.is_empty(), "{}", case.name);
            assert!(
                case.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.'),
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn data_case_names_are_unique() {
        let cases = data_cases().unwrap();
        let names: std::collections::BTreeSet<&str> =
            cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), cases.len());
    }
}
