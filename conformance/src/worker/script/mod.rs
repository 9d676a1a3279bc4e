//! Worker cases as data, and the interpreter that plays the parent.
//!
//! A case file (`conformance/cases/*.json`) is an object with an `about`
//! text, optional `defaults` and a list of `cases`. A case is either a
//! *shorthand* — a policy, some `setup` operations, one operation (or
//! just `source` for an `eval`), optional host-call exchanges and an
//! `expect` — or a list of explicit `steps`. The format is documented in
//! `conformance/README.md`; this module is its reference interpreter.

use super::conn::{Next, Received, WorkerConn, Written};
use crate::profile::Profile;
use crate::report::Verdict;
use quirl_lua_protocol::{
    HostCall, LUA_WORKER_PROTOCOL_DESCRIPTOR, OperationKind, OperationResult, ParentFrame,
    WorkerFrame, decode_parent_frame, encode_parent_frame, encode_worker_frame, frame_payload,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::time::Duration;

/// Placeholder replaced by the protocol descriptor in case texts.
pub const DESCRIPTOR_PLACEHOLDER: &str = "${DESCRIPTOR}";

/// Bound on a step when the case gives none (generous: the bound is not
/// what such a step checks).
const DEFAULT_STEP_MS: u64 = 10_000;
/// Slack added to the policy's wall time when waiting for an answer.
const ANSWER_SLACK_MS: u64 = 5_000;
/// How long a worker may take to exit after a violation or end of input.
const DEFAULT_EXIT_MS: u64 = 3_000;

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
    pub lua_free_worker: Option<super::lua_free::Contract>,
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
    fn or(self, other: PolicyData) -> PolicyData {
        PolicyData {
            allow_process: self.allow_process.or(other.allow_process),
            memory_limit_bytes: self.memory_limit_bytes.or(other.memory_limit_bytes),
            instruction_limit: self.instruction_limit.or(other.instruction_limit),
            wall_time_ms: self.wall_time_ms.or(other.wall_time_ms),
        }
    }

    fn to_json(self) -> Value {
        json!({
            "allow_process": self.allow_process.unwrap_or(false),
            "memory_limit_bytes": self.memory_limit_bytes.unwrap_or(16 * 1024 * 1024),
            "instruction_limit": self.instruction_limit.unwrap_or(10_000_000),
            "wall_time_ms": self.wall_time_ms.unwrap_or(2_000),
        })
    }

    fn wall_ms(self) -> u64 {
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
    fn describe(&self) -> String {
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

/// Expand `${REPEAT:N:TEXT}` (TEXT repeated N times; TEXT has no `}`), so
/// that case files can describe large inputs without holding them.
pub fn expand_repeats(text: &str) -> String {
    const OPEN: &str = "${REPEAT:";
    if !text.contains(OPEN) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let parsed = after.split_once(':').and_then(|(count, tail)| {
            let count: usize = count.parse().ok()?;
            let (unit, tail) = tail.split_once('}')?;
            Some((count, unit, tail))
        });
        match parsed {
            Some((count, unit, tail)) => {
                out.push_str(&unit.repeat(count));
                rest = tail;
            }
            None => {
                out.push_str(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Expand the placeholders (`${DESCRIPTOR}`, `${REPEAT:N:TEXT}`) of a text.
pub fn expand(text: &str) -> String {
    expand_repeats(&text.replace(DESCRIPTOR_PLACEHOLDER, LUA_WORKER_PROTOCOL_DESCRIPTOR))
}

/// Expand the placeholders in every string of a value.
pub fn substitute(value: &Value) -> Value {
    match value {
        Value::String(text) if text.contains("${") => Value::String(expand(text)),
        Value::Array(items) => Value::Array(items.iter().map(substitute).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), substitute(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Decode a hex string (whitespace ignored).
pub fn hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in `{text}`"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
            u8::from_str_radix(text, 16).map_err(|_| format!("bad hex `{text}`"))
        })
        .collect()
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut out = length.to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Whether `expected` is contained in `actual` (objects: the listed
/// members, recursively; arrays: same length, item by item; else equal).
pub fn subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, value)| have.get(key).is_some_and(|got| subset(value, got))),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| subset(w, h))
        }
        _ => expected == actual,
    }
}

fn abbreviate(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 200 {
        let mut cut = 200;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}… ({} bytes)", &text[..cut], text.len())
    } else {
        text
    }
}

/// A short description of a frame for failure details.
pub fn describe_frame(frame: &WorkerFrame) -> String {
    match frame {
        WorkerFrame::Response { response } => match &response.result {
            Ok(value) => format!(
                "a success response (id {}, result {})",
                response.id,
                abbreviate(value)
            ),
            Err(error) => format!(
                "an error response (id {}, {}: {})",
                response.id,
                error.code,
                abbreviate(&Value::String(error.message.clone()))
            ),
        },
        WorkerFrame::HostCall { call } => format!(
            "a host call (request {}, call {}, command {})",
            call.request_id,
            call.call_id,
            abbreviate(&Value::String(call.command.clone()))
        ),
    }
}

/// Plays one case against a fresh worker.
pub struct Interpreter<'a> {
    case: &'a CaseData,
    conn: WorkerConn,
    policy: PolicyData,
    last_id: Option<u64>,
    in_flight: Option<(u64, OperationKind)>,
    calls: u32,
    pending_call: Option<HostCall>,
    stop: bool,
}

type StepResult = Result<(), String>;

impl<'a> Interpreter<'a> {
    /// Spawn the worker for `case`.
    pub fn start(case: &'a CaseData, command: &[OsString]) -> Result<Self, String> {
        let conn = WorkerConn::spawn(command)
            .map_err(|error| format!("cannot start the worker command: {error}"))?;
        Ok(Self {
            case,
            conn,
            policy: case.policy,
            last_id: None,
            in_flight: None,
            calls: 0,
            pending_call: None,
            stop: false,
        })
    }

    /// Run every step, then the global checks, then kill and reap.
    pub fn run(mut self, steps: &[Step]) -> Verdict {
        let mut verdict = Verdict::Pass;
        for (index, step) in steps.iter().enumerate() {
            if let Err(detail) = self.step(step) {
                verdict = Verdict::fail(format!("step {}: {detail}", index + 1));
                break;
            }
            if self.stop {
                break;
            }
        }
        if verdict == Verdict::Pass
            && let Err(detail) = self.final_checks()
        {
            verdict = Verdict::fail(detail);
        }
        let _ = self.conn.kill();
        verdict
    }

    fn final_checks(&mut self) -> StepResult {
        if !self.stop {
            // Frames that arrived unasked (checked without waiting).
            if let Next::Frame(received) = self.conn.next(Duration::ZERO) {
                return Err(format!(
                    "the worker sent an unexpected extra frame: {}",
                    describe_frame(&received.frame)
                ));
            }
        }
        let (written, bytes) = self.conn.stdout_written();
        if written > 0 {
            return Err(format!(
                "the worker wrote {written} bytes to its stdout, which must stay unused (§3.1): {}",
                String::from_utf8_lossy(bytes)
                    .chars()
                    .take(120)
                    .collect::<String>()
            ));
        }
        let members = self.conn.group_members();
        if !members.is_empty() {
            let pids: Vec<String> = members.iter().map(|p| p.pid.to_string()).collect();
            return Err(format!(
                "the worker started processes of its own (pids {}); it must never start one (§15)",
                pids.join(", ")
            ));
        }
        Ok(())
    }

    fn answer_bound(&self, within: Option<u64>) -> Duration {
        Duration::from_millis(within.unwrap_or(self.policy.wall_ms() + ANSWER_SLACK_MS))
    }

    fn write(&mut self, bytes: &[u8]) -> StepResult {
        match self
            .conn
            .write(bytes, Duration::from_millis(DEFAULT_STEP_MS))
        {
            Written::All | Written::Closed => Ok(()),
            Written::Timeout => Err(format!(
                "the worker did not read {} bytes of input within {DEFAULT_STEP_MS} ms",
                bytes.len()
            )),
        }
    }

    fn step(&mut self, step: &Step) -> StepResult {
        match step {
            Step::Init(init) => self.init(init),
            Step::Request(request) => self.request(request),
            Step::Send(value) => {
                let bytes = serde_json::to_vec(&substitute(value)).map_err(|e| e.to_string())?;
                // Canonical form when the value is a valid frame, verbatim otherwise.
                let payload = match decode_parent_frame(&bytes) {
                    Ok(frame) => encode_parent_frame(&frame).unwrap_or(bytes),
                    Err(_) => bytes,
                };
                self.write(&framed(&payload))
            }
            Step::SendText(text) => self.write(&framed(expand(text).as_bytes())),
            Step::SendBytes(text) => {
                let bytes = hex(text).map_err(|e| format!("invalid case: {e}"))?;
                self.write(&bytes)
            }
            Step::SendHeader(length) => self.write(&length.to_be_bytes()),
            Step::SendPadded(padded) => {
                let prefix = expand(&padded.prefix);
                let suffix = expand(&padded.suffix);
                let fixed = prefix.len() + suffix.len();
                let count = match (padded.count, padded.payload_length) {
                    (Some(count), None) => count,
                    (None, Some(total)) => total
                        .checked_sub(fixed)
                        .and_then(|rest| rest.checked_div(padded.fill.len()))
                        .ok_or("invalid case: payload_length too small")?,
                    _ => return Err("invalid case: give count or payload_length".to_owned()),
                };
                let mut payload = Vec::with_capacity(fixed + count * padded.fill.len());
                payload.extend_from_slice(prefix.as_bytes());
                for _ in 0..count {
                    payload.extend_from_slice(padded.fill.as_bytes());
                }
                payload.extend_from_slice(suffix.as_bytes());
                let declared = padded
                    .declare
                    .unwrap_or_else(|| u32::try_from(payload.len()).unwrap_or(u32::MAX));
                let mut bytes = declared.to_be_bytes().to_vec();
                bytes.extend_from_slice(&payload);
                self.write(&bytes)
            }
            Step::SendSlowly(slowly) => {
                let bytes = match (&slowly.text, &slowly.hex) {
                    (Some(text), None) => framed(expand(text).as_bytes()),
                    (None, Some(hex_text)) => {
                        hex(hex_text).map_err(|e| format!("invalid case: {e}"))?
                    }
                    _ => return Err("invalid case: send_slowly needs text or hex".to_owned()),
                };
                for piece in bytes.chunks(slowly.chunk.max(1)) {
                    self.write(piece)?;
                    if slowly.interval_ms > 0 {
                        std::thread::sleep(Duration::from_millis(slowly.interval_ms));
                    }
                }
                Ok(())
            }
            Step::SendRaw(bytes) => self.write(bytes),
            Step::SendRequestRaw(bytes, id, kind) => {
                self.last_id = Some(*id);
                self.in_flight = Some((*id, *kind));
                self.calls = 0;
                self.pending_call = None;
                self.write(bytes)
            }
            Step::InFlight(step) => {
                let kind = OperationKind::ALL
                    .into_iter()
                    .find(|kind| kind.as_str() == step.operation)
                    .ok_or_else(|| format!("invalid case: unknown operation {}", step.operation))?;
                self.last_id = Some(step.id);
                self.in_flight = Some((step.id, kind));
                self.calls = 0;
                self.pending_call = None;
                Ok(())
            }
            Step::HostReply(reply) => self.host_reply(reply),
            Step::Close(close) => {
                if *close {
                    self.conn.close_input();
                }
                Ok(())
            }
            Step::SleepMs(ms) => {
                std::thread::sleep(Duration::from_millis(*ms));
                Ok(())
            }
            Step::ExpectResponse(expect) => self.expect_response(expect),
            Step::ExpectHostCall(expect) => self.expect_host_call(expect),
            Step::ExpectViolation(violation) => self.expect_violation(violation),
            Step::ExpectExit(exit) => self.expect_exit(exit),
        }
    }

    fn init(&mut self, init: &InitStep) -> StepResult {
        self.policy = init.policy.or(self.case.policy);
        let grants = init
            .grants
            .clone()
            .or_else(|| self.case.grants.clone())
            .unwrap_or(Value::Null);
        let process_enabled = init
            .process_enabled
            .or(self.case.process_enabled)
            .unwrap_or(false);
        let operation = json!({
            "operation": "initialize",
            "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
            "policy": self.policy.to_json(),
            "grants": grants,
            "process_enabled": process_enabled,
        });
        self.request(&RequestStep {
            id: Some(init.id.unwrap_or(1)),
            operation,
        })?;
        self.expect_response(&Expect {
            ok: Some(true),
            result: Some(Value::Null),
            within_ms: Some(DEFAULT_STEP_MS),
            ..Expect::default()
        })
        .map_err(|detail| format!("initialize: {detail}"))
    }

    fn request(&mut self, request: &RequestStep) -> StepResult {
        let id = request
            .id
            .unwrap_or_else(|| self.last_id.map_or(1, |last| last.saturating_add(1)));
        let frame = json!({
            "kind": "request",
            "request": {"version": 1, "id": id, "operation": substitute(&request.operation)},
        });
        let bytes = serde_json::to_vec(&frame).map_err(|e| e.to_string())?;
        let decoded = decode_parent_frame(&bytes)
            .map_err(|error| format!("invalid case: the request does not encode: {error}"))?;
        let ParentFrame::Request { request: decoded } = &decoded else {
            return Err("invalid case: not a request".to_owned());
        };
        let payload = encode_parent_frame(&ParentFrame::Request {
            request: decoded.clone(),
        })
        .map_err(|error| format!("invalid case: {error}"))?;
        let bytes = frame_payload(&payload).map_err(|error| format!("invalid case: {error}"))?;
        self.last_id = Some(id);
        self.in_flight = Some((id, decoded.operation.kind()));
        self.calls = 0;
        self.pending_call = None;
        self.write(&bytes)
    }

    fn host_reply(&mut self, reply: &Value) -> StepResult {
        let call = self
            .pending_call
            .take()
            .ok_or("invalid case: host_reply without a pending host call")?;
        let mut response = serde_json::Map::new();
        response.insert("request_id".to_owned(), json!(call.request_id));
        response.insert("call_id".to_owned(), json!(call.call_id));
        let Value::Object(members) = reply else {
            return Err("invalid case: host_reply must be an object".to_owned());
        };
        for (key, value) in members {
            response.insert(key.clone(), value.clone());
        }
        let frame = json!({"kind": "host_response", "response": Value::Object(response)});
        let bytes = serde_json::to_vec(&frame).map_err(|e| e.to_string())?;
        let decoded = decode_parent_frame(&bytes)
            .map_err(|error| format!("invalid case: the host response does not encode: {error}"))?;
        let payload = encode_parent_frame(&decoded).map_err(|e| format!("invalid case: {e}"))?;
        let bytes = frame_payload(&payload).map_err(|e| format!("invalid case: {e}"))?;
        self.write(&bytes)
    }

    /// The next frame, checked for canonical form.
    fn receive(&mut self, bound: Duration) -> Result<Option<Received>, String> {
        match self.conn.next(bound) {
            Next::Frame(received) => {
                let canonical = encode_worker_frame(&received.frame)
                    .map_err(|error| format!("cannot re-encode the worker's frame: {error}"))?;
                if canonical != received.payload {
                    return Err(format!(
                        "the worker sent a frame that is not in canonical form (§12.1): sent {}, canonical {}",
                        String::from_utf8_lossy(&received.payload)
                            .chars()
                            .take(300)
                            .collect::<String>(),
                        String::from_utf8_lossy(&canonical)
                            .chars()
                            .take(300)
                            .collect::<String>()
                    ));
                }
                Ok(Some(*received))
            }
            Next::Invalid(error) => Err(format!(
                "the worker sent bytes that are not a valid frame ({}: {})",
                error.kind(),
                error.message()
            )),
            Next::Closed => {
                let (status, _) = self.conn.wait_exit(Duration::from_millis(500));
                Err(format!(
                    "the worker closed its output ({})",
                    status.map_or_else(|| "still running".to_owned(), crate::proc::describe_status)
                ))
            }
            Next::Timeout => Ok(None),
        }
    }

    fn expect_response(&mut self, expect: &Expect) -> StepResult {
        let bound = self.answer_bound(expect.within_ms);
        let Some(received) = self.receive(bound)? else {
            if expect.allow_no_answer {
                self.stop = true;
                return Ok(());
            }
            return Err(format!("no response within {} ms", bound.as_millis()));
        };
        let WorkerFrame::Response { response } = &received.frame else {
            return Err(format!(
                "expected a response, got {}",
                describe_frame(&received.frame)
            ));
        };
        if self.pending_call.is_some() {
            return Err("the worker answered while its host call was pending (§9.2)".to_owned());
        }
        let (in_flight_id, kind) = self.in_flight.take().ok_or_else(|| {
            format!(
                "the worker sent {} with no request in flight",
                describe_frame(&received.frame)
            )
        })?;
        let want_id = expect.id.unwrap_or(in_flight_id);
        if response.id != want_id {
            return Err(format!(
                "response id {} does not match the request in flight {want_id} (§9.1)",
                response.id
            ));
        }
        if let Ok(value) = &response.result
            && let Err(error) = OperationResult::decode(kind, value)
        {
            return Err(format!(
                "the {} result does not have the operation's shape (§7.2): {}: {}",
                kind.as_str(),
                error.kind(),
                error.message()
            ));
        }
        check_answer(expect, &received.frame)
    }

    fn expect_host_call(&mut self, expect: &HostCallExpect) -> StepResult {
        let bound = Duration::from_millis(
            expect
                .within_ms
                .unwrap_or(self.policy.wall_ms() + ANSWER_SLACK_MS),
        );
        let Some(received) = self.receive(bound)? else {
            return Err(format!("no host call within {} ms", bound.as_millis()));
        };
        let WorkerFrame::HostCall { call } = received.frame else {
            return Err(format!(
                "expected a host call, got {}",
                describe_frame(&received.frame)
            ));
        };
        let (in_flight, kind) = self
            .in_flight
            .ok_or("the worker sent a host call with no request in flight")?;
        if kind == OperationKind::Initialize {
            return Err("the worker sent a host call during initialize (§9.3)".to_owned());
        }
        if call.request_id != in_flight {
            return Err(format!(
                "host call request_id {} is not the request in flight {in_flight} (§9.2)",
                call.request_id
            ));
        }
        let want_call = expect.call_id.unwrap_or(self.calls + 1);
        if call.call_id != want_call {
            return Err(format!(
                "host call id {} where {want_call} was due (§9.2)",
                call.call_id
            ));
        }
        if let Some(command) = &expect.command
            && &call.command != command
        {
            return Err(format!(
                "host call command {:?}, expected {command:?}",
                call.command
            ));
        }
        if call.deadline_ms > self.policy.wall_ms() {
            return Err(format!(
                "host call deadline_ms {} exceeds the request's wall time {} (§6.6)",
                call.deadline_ms,
                self.policy.wall_ms()
            ));
        }
        self.calls = call.call_id;
        self.pending_call = Some(call);
        Ok(())
    }

    fn expect_violation(&mut self, step: &ViolationStep) -> StepResult {
        let bound = Duration::from_millis(step.within_ms.unwrap_or(DEFAULT_EXIT_MS));
        let (status, sent) = self.conn.wait_exit(bound);
        self.stop = true;
        if let Some(next) = sent.first() {
            return Err(match next {
                Next::Frame(received) => {
                    let what = describe_frame(&received.frame);
                    match &received.frame {
                        WorkerFrame::HostCall { .. } => format!(
                            "the worker executed the hostile request instead of ending the session: it sent {what} (§9.6, §13.1)"
                        ),
                        WorkerFrame::Response { response } if response.result.is_ok() => format!(
                            "the worker went on instead of ending the session: it sent {what} (§9.6, §13.1)"
                        ),
                        WorkerFrame::Response { .. } => format!(
                            "the worker answered the violation with {what}; it must write no further frame (§9.6)"
                        ),
                    }
                }
                Next::Invalid(error) => format!(
                    "the worker wrote bytes that are not a frame after the violation ({})",
                    error.kind()
                ),
                Next::Closed | Next::Timeout => "unexpected".to_owned(),
            });
        }
        match status {
            None => Err(format!(
                "the worker did not exit within {} ms of the violation (§13.1)",
                bound.as_millis()
            )),
            Some(status) if status.success() && step.allow_clean_exit => Ok(()),
            Some(status) if status.success() => Err(
                "the worker exited with status 0 after a violation; it must exit nonzero (§3.3)"
                    .to_owned(),
            ),
            Some(status) if status.code().is_none() => Err(format!(
                "the worker died of a {} instead of exiting nonzero (§3.3)",
                crate::proc::describe_status(status)
            )),
            Some(_) => Ok(()),
        }
    }

    fn expect_exit(&mut self, step: &ExitStep) -> StepResult {
        let bound = Duration::from_millis(step.within_ms.unwrap_or(DEFAULT_EXIT_MS));
        let (status, sent) = self.conn.wait_exit(bound);
        self.stop = true;
        if let Some(Next::Frame(received)) = sent.first() {
            return Err(format!(
                "the worker sent {} instead of exiting",
                describe_frame(&received.frame)
            ));
        }
        if let Some(Next::Invalid(error)) = sent.first() {
            return Err(format!(
                "the worker wrote bytes that are not a frame before exiting ({})",
                error.kind()
            ));
        }
        match status {
            None => Err(format!(
                "the worker did not exit within {} ms",
                bound.as_millis()
            )),
            Some(status) if status.code() == Some(step.code) => Ok(()),
            Some(status) => Err(format!(
                "the worker ended with {}; exit {} was due",
                crate::proc::describe_status(status),
                step.code
            )),
        }
    }
}

/// Check a response against the expectation (the id was checked already).
pub fn check_answer(expect: &Expect, frame: &WorkerFrame) -> StepResult {
    let WorkerFrame::Response { response } = frame else {
        return Err(format!(
            "expected a response, got {}",
            describe_frame(frame)
        ));
    };
    if expect.any_answer {
        return Ok(());
    }
    match &response.result {
        Ok(value) => {
            if expect.ok == Some(false) || expect.error_code.is_some() {
                let due = expect
                    .error_code
                    .as_ref()
                    .map_or_else(|| "an error".to_owned(), OneOrMany::describe);
                return Err(format!(
                    "the request succeeded with {} where {due} was due",
                    abbreviate(value)
                ));
            }
            if let Some(want) = &expect.result
                && want != value
            {
                return Err(format!(
                    "result {}, expected {}",
                    abbreviate(value),
                    abbreviate(want)
                ));
            }
            if let Some(want) = &expect.result_subset
                && !subset(want, value)
            {
                return Err(format!(
                    "result {} does not contain {}",
                    abbreviate(value),
                    abbreviate(want)
                ));
            }
            if let Some(forbidden) = &expect.forbid_result
                && forbidden == value
            {
                return Err(format!(
                    "the guest escaped: the request returned {}",
                    abbreviate(value)
                ));
            }
            Ok(())
        }
        Err(error) => {
            if expect.ok == Some(true) || expect.result.is_some() || expect.result_subset.is_some()
            {
                return Err(format!(
                    "the request failed ({}: {}) where success was due",
                    error.code,
                    abbreviate(&Value::String(error.message.clone()))
                ));
            }
            if let Some(codes) = &expect.error_code
                && !codes.contains(error.code.as_str())
            {
                return Err(format!(
                    "error code {} ({}), expected {}",
                    error.code,
                    abbreviate(&Value::String(error.message.clone())),
                    codes.describe()
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use quirl_lua_protocol::decode_worker_frame;

    fn frame(json: &str) -> WorkerFrame {
        decode_worker_frame(json.as_bytes()).unwrap()
    }

    #[test]
    fn subset_matches_members_recursively() {
        assert!(subset(
            &json!({"a": {"b": 1}}),
            &json!({"a": {"b": 1, "c": 2}, "d": 3})
        ));
        assert!(!subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!subset(&json!([1]), &json!([1, 2])));
        assert!(subset(&json!([{"x": 1}]), &json!([{"x": 1, "y": 2}])));
    }

    #[test]
    fn hex_decodes_and_rejects_garbage() {
        assert_eq!(hex("00 01 ff").unwrap(), vec![0, 1, 255]);
        assert!(hex("0").is_err());
        assert!(hex("zz").is_err());
    }

    #[test]
    fn repeats_expand_and_malformed_ones_stay() {
        assert_eq!(expand_repeats("a${REPEAT:3:xy}b"), "axyxyxyb");
        assert_eq!(expand_repeats("${REPEAT:2:-}${REPEAT:0:z}"), "--");
        assert_eq!(expand_repeats("${REPEAT:x:y}"), "${REPEAT:x:y}");
        assert_eq!(expand_repeats("${REPEAT:2:open"), "${REPEAT:2:open");
    }

    #[test]
    fn substitute_replaces_the_descriptor_everywhere() {
        let value = substitute(&json!({"a": ["x${DESCRIPTOR}"]}));
        assert_eq!(value["a"][0], format!("x{LUA_WORKER_PROTOCOL_DESCRIPTOR}"));
    }

    #[test]
    fn answers_are_checked_against_the_expectation() {
        let ok =
            frame(r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":42}}"#);
        let err = frame(
            r#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"resource_limit","message":"m","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}"#,
        );
        let want_42 = Expect {
            result: Some(json!(42)),
            ..Expect::default()
        };
        assert!(check_answer(&want_42, &ok).is_ok());
        assert!(check_answer(&want_42, &err).is_err());
        let want_limit = Expect {
            error_code: Some(OneOrMany::Many(vec!["lua".into(), "resource_limit".into()])),
            ..Expect::default()
        };
        assert!(check_answer(&want_limit, &err).is_ok());
        assert!(check_answer(&want_limit, &ok).is_err());
        let forbid = Expect {
            forbid_result: Some(json!(42)),
            ..Expect::default()
        };
        assert!(check_answer(&forbid, &ok).is_err());
        assert!(check_answer(&forbid, &err).is_ok());
    }

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
