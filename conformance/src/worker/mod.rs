//! The worker suite: the runner plays a (hostile) parent against any worker
//! command, one fresh worker process per case.
//!
//! Cases come from the data files `conformance/cases/worker*.json` and from
//! the golden fixtures' manifest, both embedded in the binary (`embedded`).
//! Each case spawns the worker in a process group of its own, plays its
//! steps with a bound on every wait, checks the global rules (nothing on
//! stdout, every frame valid and canonical, no process started by the
//! worker), then kills the group and reaps the worker.

pub mod conn;
pub mod fixtures;
pub mod lua_free;
pub mod script;

use crate::embedded::{self, Fixtures};
use crate::exec::Case;
use crate::profile::Profile;
use crate::report::Verdict;
use script::{CaseData, CaseFile, Interpreter, Step};
use std::ffi::OsString;
use std::sync::Arc;

/// The prefix of the worker suite's case file names.
pub const CASE_FILE_PREFIX: &str = "worker";

/// One worker case, ready to run.
pub struct WorkerCase {
    data: CaseData,
    steps: Result<Vec<Step>, String>,
    protocol_only: bool,
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
    fn profile(&self) -> Profile {
        self.data.profile()
    }
    fn protocol_only(&self) -> bool {
        self.protocol_only
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

/// Every case of the embedded data files, in file order.
pub fn data_cases() -> Result<Vec<CaseData>, String> {
    let mut out = Vec::new();
    for (name, text) in embedded::case_files(CASE_FILE_PREFIX) {
        out.extend(parse_case_file(name, text)?);
    }
    Ok(out)
}

/// The Lua-free worker contract as the case files state it (exactly one
/// file states it).
pub fn lua_free_contract() -> Result<lua_free::Contract, String> {
    let mut found = Vec::new();
    for (name, text) in embedded::case_files(CASE_FILE_PREFIX) {
        let file: CaseFile =
            serde_json::from_str(text).map_err(|error| format!("{name}: {error}"))?;
        if let Some(contract) = file.lua_free_worker {
            found.push(contract);
        }
    }
    match found.len() {
        1 => found.pop().ok_or_else(|| "unreachable".to_owned()),
        n => Err(format!(
            "{n} case files state the Lua-free worker contract; one must"
        )),
    }
}

/// Build the whole suite for `command`.
pub fn suite(command: Vec<OsString>, fixtures: &Fixtures) -> Result<Vec<WorkerCase>, String> {
    let command = Arc::new(command);
    let mut all = data_cases()?;
    all.extend(fixtures::cases(fixtures)?);
    let mut seen = std::collections::BTreeSet::new();
    for case in &all {
        if !seen.insert(case.name.clone()) {
            return Err(format!("two cases are named {}", case.name));
        }
    }
    Ok(all
        .into_iter()
        .map(|data| {
            let steps = data.expanded_steps();
            let protocol_only = steps
                .as_ref()
                .is_ok_and(|steps| lua_free::protocol_only(&data, steps));
            WorkerCase {
                steps,
                protocol_only,
                data,
                command: Arc::clone(&command),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

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

    #[test]
    fn cases_marked_lua_free_are_lua_free() {
        for case in data_cases().unwrap() {
            if case.lua_free == Some(true) {
                let steps = case.expanded_steps().unwrap();
                lua_free::judged_by_envelope(&steps)
                    .unwrap_or_else(|why| panic!("{} says lua_free but {why}", case.name));
            }
        }
    }

    #[test]
    fn the_case_files_state_the_contract_the_runner_applies() {
        let contract = lua_free_contract().unwrap();
        assert!(contract.initialize.ok);
        assert_eq!(contract.initialize.result, serde_json::Value::Null);
        assert_eq!(contract.eval.source, "return <decimal integer>");
        assert!(contract.eval.ok);
        assert!(!contract.otherwise.ok);
        assert_eq!(
            contract.otherwise.error_code.as_deref(),
            Some(lua_free::OTHERWISE_ERROR_CODE)
        );
        let answer = lua_free::answer_to(1, &json!({"operation": "eval", "source": "return 12"}));
        assert!(answer.is_some());
    }

    #[test]
    fn profiles_split_the_suite_and_protocol_only_is_a_lua_free_subset() {
        let suite = suite(vec!["/bin/true".into()], &Fixtures::Embedded).unwrap();
        let protocol_only: Vec<&WorkerCase> =
            suite.iter().filter(|case| case.protocol_only()).collect();
        assert!(protocol_only.len() > 500, "{}", protocol_only.len());
        for case in &protocol_only {
            assert_eq!(case.profile(), Profile::Protocol, "{}", case.name());
            assert!(!case.tags().iter().any(|t| t == "sdk"), "{}", case.name());
        }
        let names: Vec<&str> = protocol_only.iter().map(|c| c.name()).collect();
        assert!(names.contains(&"handshake.initialize_is_answered_with_a_null_result"));
        assert!(
            !names.iter().any(|n| n.starts_with("sandbox.")),
            "{names:?}"
        );
        assert!(
            suite
                .iter()
                .any(|case| case.profile() == Profile::ReferenceSandbox)
        );
    }
}
