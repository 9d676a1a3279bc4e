//! The case file format (`conformance/README.md`): files, defaults, cases,
//! expectations and the explicit steps, and the expansion of a shorthand
//! case into steps.

use crate::profile::Profile;
use quirl_lua_protocol::records::OperationKind;
use serde::Deserialize;
use serde_json::{Value, json};

/// A case file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// What the file covers.
    pub about: String,
    /// Defaults for every case of the file.
    #[serde(default)]
    pub defaults: Defaults,
    /// The contract a worker without Lua answers by (`--protocol-only`),
    /// stated once, in `worker-session.json` (`worker::lua_free`).
    #[serde(default)]
    pub lua_free_worker: Option<crate::worker::lua_free::Contract>,
    /// The cases.
    pub cases: Vec<CaseData>,
}

/// File-level defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Policy members not given by a case.
    #[serde(default)]
    pub policy: PolicyData,
    /// Grants (`null` or an array).
    #[serde(default)]
    pub grants: Option<Value>,
    /// `process_enabled` of `initialize`.
    #[serde(default)]
    pub process_enabled: Option<bool>,
    /// Tags added to every case.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Name prefix (`sandbox.`) added to every case.
    #[serde(default)]
    pub prefix: String,
    /// Profile of every case that names none (default `protocol`).
    #[serde(default)]
    pub profile: Option<Profile>,
    /// `lua_free` of every case that says nothing (see [`CaseData::lua_free`]).
    #[serde(default)]
    pub lua_free: Option<bool>,
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseData {
    /// Unique name, after the MUST it checks.
    pub name: String,
    /// SPEC.md section(s).
    pub spec: String,
    /// The requirement, in words.
    pub must: String,
    /// `sdk` marks cases that depend on the Quirl Lua SDK.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What the case binds: `protocol` (every worker; the default) or
    /// `reference-sandbox` (a choice of the reference sandbox).
    #[serde(default)]
    pub profile: Option<Profile>,
    /// `false` keeps the case out of `--protocol-only` runs although a
    /// worker without Lua could answer its requests (its meaning depends
    /// on Lua); `true` asserts that it is Lua-free (checked by the tests).
    /// Absent: derived from the steps (`worker::lua_free`).
    #[serde(default)]
    pub lua_free: Option<bool>,
    /// Policy of the `initialize` (members default from the file).
    #[serde(default)]
    pub policy: PolicyData,
    /// Grants of the `initialize`.
    #[serde(default)]
    pub grants: Option<Value>,
    /// `process_enabled` of the `initialize`.
    #[serde(default)]
    pub process_enabled: Option<bool>,
    /// Shorthand: operations that must succeed first.
    #[serde(default)]
    pub setup: Vec<Value>,
    /// Shorthand: the source of an `eval`.
    #[serde(default)]
    pub source: Option<String>,
    /// Shorthand: the operation object.
    #[serde(default)]
    pub operation: Option<Value>,
    /// Shorthand: host calls the operation makes, and their answers.
    #[serde(default)]
    pub host: Vec<HostExchange>,
    /// Shorthand: what the answer must be.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// Explicit steps (instead of the shorthand).
    #[serde(default)]
    pub steps: Option<Vec<Step>>,
}

/// Policy members; absent ones take the defaults.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyData {
    /// `allow_process`.
    pub allow_process: Option<bool>,
    /// `memory_limit_bytes`.
    pub memory_limit_bytes: Option<u64>,
    /// `instruction_limit`.
    pub instruction_limit: Option<u64>,
    /// `wall_time_ms`.
    pub wall_time_ms: Option<u64>,
}

impl PolicyData {
    pub(super) fn or(self, other: PolicyData) -> PolicyData {
        PolicyData {
            allow_process: self.allow_process.or(other.allow_process),
            memory_limit_bytes: self.memory_limit_bytes.or(other.memory_limit_bytes),
            instruction_limit: self.instruction_limit.or(other.instruction_limit),
            wall_time_ms: self.wall_time_ms.or(other.wall_time_ms),
        }
    }

    pub(super) fn to_json(self) -> Value {
        json!({
            "allow_process": self.allow_process.unwrap_or(false),
            "memory_limit_bytes": self.memory_limit_bytes.unwrap_or(16 * 1024 * 1024),
            "instruction_limit": self.instruction_limit.unwrap_or(10_000_000),
            "wall_time_ms": self.wall_time_ms.unwrap_or(2_000),
        })
    }

    pub(super) fn wall_ms(self) -> u64 {
        self.wall_time_ms.unwrap_or(2_000)
    }
}

/// A host call the operation must make and the answer to give.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostExchange {
    /// What the host call must look like.
    #[serde(default)]
    pub expect: HostCallExpect,
    /// The answer: `{"outcome":{…}}` or `{"error":{…}}`.
    pub reply: Value,
}

/// Checks on a host call.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCallExpect {
    /// Expected `call_id` (default: one more than the previous call).
    pub call_id: Option<u32>,
    /// Expected `command`.
    pub command: Option<String>,
    /// Bound for the call to arrive.
    pub within_ms: Option<u64>,
}

/// One error code or a list of acceptable ones.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// Exactly this.
    One(String),
    /// Any of these.
    Many(Vec<String>),
}

impl OneOrMany {
    /// Whether `code` is (one of) the expected code(s).
    pub fn contains(&self, code: &str) -> bool {
        match self {
            OneOrMany::One(one) => one == code,
            OneOrMany::Many(many) => many.iter().any(|c| c == code),
        }
    }
    pub(super) fn describe(&self) -> String {
        match self {
            OneOrMany::One(one) => one.clone(),
            OneOrMany::Many(many) => many.join(" or "),
        }
    }
}

/// What a response must look like.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Response id (default: the request in flight).
    pub id: Option<u64>,
    /// `ok` must be this.
    pub ok: Option<bool>,
    /// The result must equal this (implies `ok: true`).
    pub result: Option<Value>,
    /// The result must contain this (objects: these members, recursively).
    pub result_subset: Option<Value>,
    /// The result must not be this (an escape marker); errors are fine.
    pub forbid_result: Option<Value>,
    /// The error code must be this (implies `ok: false`).
    pub error_code: Option<OneOrMany>,
    /// Any well-formed response to the request passes.
    #[serde(default)]
    pub any_answer: bool,
    /// No answer at all within the bound also passes (native stalls a
    /// parent must kill); a success still fails.
    #[serde(default)]
    pub allow_no_answer: bool,
    /// Bound for the answer (default: wall time + 5 s).
    pub within_ms: Option<u64>,
}

/// Padded payload: `prefix`, `fill` repeated, `suffix`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Padded {
    /// Text before the padding.
    #[serde(default)]
    pub prefix: String,
    /// One character repeated.
    pub fill: String,
    /// Repetitions of `fill` …
    pub count: Option<usize>,
    /// … or the total payload length to reach.
    pub payload_length: Option<usize>,
    /// Text after the padding.
    #[serde(default)]
    pub suffix: String,
    /// Declared length to write instead of the true one.
    pub declare: Option<u32>,
}

/// Bytes written a few at a time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowly {
    /// Payload text (framed) …
    pub text: Option<String>,
    /// … or raw bytes in hex (not framed).
    pub hex: Option<String>,
    /// Bytes per write.
    #[serde(default = "one")]
    pub chunk: usize,
    /// Pause between writes.
    #[serde(default)]
    pub interval_ms: u64,
}

fn one() -> usize {
    1
}

/// `initialize` options of an `init` step.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitStep {
    /// Request id (default 1).
    pub id: Option<u64>,
    /// Policy members (default: the case's).
    #[serde(default)]
    pub policy: PolicyData,
    /// Grants (default: the case's).
    pub grants: Option<Value>,
    /// `process_enabled` (default: the case's).
    pub process_enabled: Option<bool>,
}

/// A valid request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestStep {
    /// Request id (default: one more than the last).
    pub id: Option<u64>,
    /// The operation object.
    pub operation: Value,
}

/// The request carried by the following raw bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InFlightStep {
    /// Its id.
    pub id: u64,
    /// Its operation name (`eval`, `render_prompt`, …).
    pub operation: String,
}

/// Exit checks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitStep {
    /// The exit status required.
    #[serde(default)]
    pub code: i32,
    /// Bound.
    pub within_ms: Option<u64>,
}

/// Violation checks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViolationStep {
    /// Bound for the worker to exit.
    pub within_ms: Option<u64>,
    /// Also accept exit status 0: for a worker that may have ended the
    /// session on its own (retired) before it read the offending frame.
    #[serde(default)]
    pub allow_clean_exit: bool,
}

/// One step of an explicit case.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Send a valid `initialize` and require `ok: true, result: null`.
    Init(InitStep),
    /// Send a valid request (checked and encoded by the protocol crate).
    Request(RequestStep),
    /// Send this JSON value as one frame (canonical form when it decodes).
    Send(Value),
    /// Send this text as one frame payload, verbatim.
    SendText(String),
    /// Send these bytes (hex), unframed.
    SendBytes(String),
    /// Send a bare 4-byte length prefix.
    SendHeader(u32),
    /// Send a padded frame.
    SendPadded(Padded),
    /// Send bytes a few at a time.
    SendSlowly(Slowly),
    /// Raw bytes (built by the runner, not read from case files).
    #[serde(skip)]
    SendRaw(Vec<u8>),
    /// A framed request given as raw bytes, with its id and operation
    /// (built by the runner from fixtures).
    #[serde(skip)]
    SendRequestRaw(Vec<u8>, u64, OperationKind),
    /// Declare the request that the next raw bytes carry (for
    /// `send_padded` / `send_slowly` requests): its id and operation name.
    InFlight(InFlightStep),
    /// Answer the pending host call: `{"outcome":{…}}` or `{"error":{…}}`.
    HostReply(Value),
    /// Close the worker's stdin.
    Close(bool),
    /// Pause.
    SleepMs(u64),
    /// Require a response.
    ExpectResponse(Expect),
    /// Require a host call.
    ExpectHostCall(HostCallExpect),
    /// Require the worker to end the session for a violation: no frame,
    /// a nonzero exit status, within the bound.
    ExpectViolation(ViolationStep),
    /// Require the worker to exit with `code` without sending anything.
    ExpectExit(ExitStep),
}

impl CaseData {
    /// The case's profile (`protocol` when neither it nor its file names one).
    pub fn profile(&self) -> Profile {
        self.profile.unwrap_or_default()
    }

    /// Apply file defaults.
    pub fn with_defaults(mut self, defaults: &Defaults) -> Self {
        self.policy = self.policy.or(defaults.policy);
        if self.grants.is_none() {
            self.grants.clone_from(&defaults.grants);
        }
        if self.process_enabled.is_none() {
            self.process_enabled = defaults.process_enabled;
        }
        for tag in &defaults.tags {
            if !self.tags.contains(tag) {
                self.tags.push(tag.clone());
            }
        }
        if self.profile.is_none() {
            self.profile = defaults.profile;
        }
        if self.lua_free.is_none() {
            self.lua_free = defaults.lua_free;
        }
        if !defaults.prefix.is_empty() && !self.name.starts_with(&defaults.prefix) {
            self.name = format!("{}{}", defaults.prefix, self.name);
        }
        self
    }

    /// The explicit steps, expanding the shorthand.
    pub fn expanded_steps(&self) -> Result<Vec<Step>, String> {
        if let Some(steps) = &self.steps {
            if self.source.is_some() || self.operation.is_some() || self.expect.is_some() {
                return Err("a case has either steps or the shorthand, not both".to_owned());
            }
            return Ok(steps.clone());
        }
        let operation = match (&self.source, &self.operation) {
            (Some(source), None) => json!({"operation": "eval", "source": source}),
            (None, Some(operation)) => operation.clone(),
            _ => return Err("a shorthand case needs exactly one of source or operation".to_owned()),
        };
        let expect = self
            .expect
            .clone()
            .ok_or_else(|| "a shorthand case needs expect".to_owned())?;
        let mut steps = vec![Step::Init(InitStep::default())];
        for setup in &self.setup {
            steps.push(Step::Request(RequestStep {
                id: None,
                operation: setup.clone(),
            }));
            steps.push(Step::ExpectResponse(Expect {
                ok: Some(true),
                ..Expect::default()
            }));
        }
        steps.push(Step::Request(RequestStep {
            id: None,
            operation,
        }));
        for exchange in &self.host {
            steps.push(Step::ExpectHostCall(exchange.expect.clone()));
            steps.push(Step::HostReply(exchange.reply.clone()));
        }
        steps.push(Step::ExpectResponse(expect));
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn shorthand_expands_to_init_setup_request_and_expect() {
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m",
            "setup": [{"operation": "eval", "source": "x = 1"}],
            "source": "return x",
            "expect": {"result": 1}
        }))
        .unwrap();
        let steps = case.expanded_steps().unwrap();
        assert_eq!(steps.len(), 5);
        assert!(matches!(steps[0], Step::Init(_)));
        assert!(matches!(steps[4], Step::ExpectResponse(_)));
    }

    #[test]
    fn unknown_members_in_case_data_are_rejected() {
        let result: Result<CaseData, _> = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m", "sorce": "typo"
        }));
        assert!(result.is_err());
    }
}
