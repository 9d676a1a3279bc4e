//! The interpreter: spawns the worker for one case, plays its steps in
//! order — sending frames, bytes and host responses as the parent — and
//! hands the expect steps to `judge`.

use super::model::{
    CaseData, Expect, InFlightStep, InitStep, Padded, PolicyData, RequestStep, Slowly, Step,
};
use super::substitute::{expand, hex, substitute};
use crate::report::Verdict;
use crate::worker::conn::{WorkerConn, Written};
use quirl_lua_protocol::records::{HostCall, OperationKind, ParentFrame};
use quirl_lua_protocol::{
    LUA_WORKER_PROTOCOL_DESCRIPTOR, decode_parent_frame, encode_parent_frame, frame_payload,
};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::time::Duration;

/// Bound on a step when the case gives none (generous: the bound is not
/// what such a step checks).
pub(super) const DEFAULT_STEP_MS: u64 = 10_000;
/// Slack added to the policy's wall time when waiting for an answer.
pub(super) const ANSWER_SLACK_MS: u64 = 5_000;
/// How long a worker may take to exit after a violation or end of input.
pub(super) const DEFAULT_EXIT_MS: u64 = 3_000;

fn framed(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut out = length.to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Plays one case against a fresh worker.
pub struct Interpreter<'a> {
    pub(super) case: &'a CaseData,
    pub(super) conn: WorkerConn,
    pub(super) policy: PolicyData,
    pub(super) last_id: Option<u64>,
    pub(super) in_flight: Option<(u64, OperationKind)>,
    pub(super) calls: u32,
    pub(super) pending_call: Option<HostCall>,
    pub(super) stop: bool,
}

pub(super) type StepResult = Result<(), String>;

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

    pub(super) fn answer_bound(&self, within: Option<u64>) -> Duration {
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
            Step::Send(value) => self.send_value(value),
            Step::SendText(text) => self.write(&framed(expand(text).as_bytes())),
            Step::SendBytes(text) => {
                let bytes = hex(text).map_err(|e| format!("invalid case: {e}"))?;
                self.write(&bytes)
            }
            Step::SendHeader(length) => self.write(&length.to_be_bytes()),
            Step::SendPadded(padded) => self.write(&padded_frame(padded)?),
            Step::SendSlowly(slowly) => self.send_slowly(slowly),
            Step::SendRaw(bytes) => self.write(bytes),
            Step::SendRequestRaw(bytes, id, kind) => {
                self.begin_request(*id, *kind);
                self.write(bytes)
            }
            Step::InFlight(step) => self.declare_in_flight(step),
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

    /// Record that request `id` of `kind` is now in flight: no host call
    /// made or pending yet.
    fn begin_request(&mut self, id: u64, kind: OperationKind) {
        self.last_id = Some(id);
        self.in_flight = Some((id, kind));
        self.calls = 0;
        self.pending_call = None;
    }

    /// `send`: the value as one frame, in canonical form when it decodes as
    /// a parent frame, verbatim otherwise.
    fn send_value(&mut self, value: &Value) -> StepResult {
        let bytes = serde_json::to_vec(&substitute(value)).map_err(|e| e.to_string())?;
        let payload = match decode_parent_frame(&bytes) {
            Ok(frame) => encode_parent_frame(&frame).unwrap_or(bytes),
            Err(_) => bytes,
        };
        self.write(&framed(&payload))
    }

    /// `send_slowly`: the bytes `chunk` at a time, pausing between writes.
    fn send_slowly(&mut self, slowly: &Slowly) -> StepResult {
        let bytes = match (&slowly.text, &slowly.hex) {
            (Some(text), None) => framed(expand(text).as_bytes()),
            (None, Some(hex_text)) => hex(hex_text).map_err(|e| format!("invalid case: {e}"))?,
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

    /// `in_flight`: declare the request the following raw bytes carry.
    fn declare_in_flight(&mut self, step: &InFlightStep) -> StepResult {
        let kind = OperationKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == step.operation)
            .ok_or_else(|| format!("invalid case: unknown operation {}", step.operation))?;
        self.begin_request(step.id, kind);
        Ok(())
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
        self.begin_request(id, decoded.operation.kind());
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
}

/// The bytes of a `send_padded` step: its declared (or true) length, then
/// `prefix`, `fill` repeated and `suffix`.
fn padded_frame(padded: &Padded) -> Result<Vec<u8>, String> {
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
    Ok(bytes)
}
