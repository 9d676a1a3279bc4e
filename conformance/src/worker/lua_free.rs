//! Which worker cases a worker without Lua can pass (`--protocol-only`,
//! SPEC.md §19).
//!
//! The Lua-free worker contract: such a worker answers `initialize`
//! successfully (after the checks of §8 and §10), answers an `eval` whose
//! source is exactly `return <decimal integer>` with that integer, and
//! answers every other valid request with an error response of code
//! `invalid_command`; it ends the session on every violation exactly like
//! any worker (§9.6, §13.1) and exits 0 at a clean end of input (§9.5).
//! `cases/worker-session.json` states the same contract as data
//! (`lua_free_worker`), checked against this module by the tests.
//!
//! A case is Lua-free when playing its steps against that contract meets
//! every expectation: each response the case expects is judged by its
//! envelope alone (ok, id, error code) and accepts the contract's answer,
//! and the case waits for no host call. The derivation simulates the
//! contract's answer for every request and checks it with the same
//! [`check_answer`] the interpreter uses. An `invalid_command` answer only
//! counts when the case accepts any answer (it checks that the request is
//! read and answered with its id) or names `invalid_command`: a case that
//! expects "some error" from guest code judges Lua, and a worker without
//! Lua would pass it without meaning.

use super::script::{CaseData, Expect, Step, check_answer, expand, substitute};
use quirl_lua_protocol::records::{ParentFrame, WorkerFrame};
use quirl_lua_protocol::{decode_parent_frame, decode_worker_frame};
use serde::Deserialize;
use serde_json::{Value, json};

/// The error code a Lua-free worker answers every other request with.
pub const OTHERWISE_ERROR_CODE: &str = "invalid_command";

/// The contract as stated in a case file's `lua_free_worker` member.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// The contract in words.
    pub about: String,
    /// How `initialize` is answered.
    pub initialize: Answer,
    /// How `eval` of `return <decimal integer>` is answered.
    pub eval: EvalAnswer,
    /// How every other request is answered.
    pub otherwise: Answer,
}

/// An answer by envelope.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// `ok` of the response.
    pub ok: bool,
    /// The result of a success (`null` when absent).
    #[serde(default)]
    pub result: Value,
    /// The error code of a failure.
    #[serde(default)]
    pub error_code: Option<String>,
}

/// The `eval` rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalAnswer {
    /// The source form, `return <decimal integer>`.
    pub source: String,
    /// `ok` of the response.
    pub ok: bool,
    /// What the result is, in words (`the integer`).
    pub result: String,
}

/// The integer of a source that is exactly `return <decimal integer>`
/// (one space, an optional `-`, decimal digits, the value within
/// −(2^63 − 1)..=2^63 − 1; SPEC §19.2). `-9223372036854775808` is left out
/// because Lua 5.4 reads it as the negation of a float.
pub fn returned_integer(source: &str) -> Option<i64> {
    let digits = source.strip_prefix("return ")?;
    let unsigned = digits.strip_prefix('-').unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|integer| *integer != i64::MIN)
}

/// The response a Lua-free worker gives to the request `operation` with
/// `id` (`None` only if that response would not encode, which the records
/// built here never do).
pub fn answer_to(id: u64, operation: &Value) -> Option<WorkerFrame> {
    answer_with_kind(id, operation).map(|(frame, _)| frame)
}

/// The answer, and whether it is the `invalid_command` one.
fn answer_with_kind(id: u64, operation: &Value) -> Option<(WorkerFrame, bool)> {
    let name = operation.get("operation").and_then(Value::as_str);
    let source = operation.get("source").and_then(Value::as_str);
    let result = match (name, source.and_then(returned_integer)) {
        (Some("initialize"), _) => Ok(Value::Null),
        (Some("eval"), Some(integer)) => Ok(json!(integer)),
        _ => Err(()),
    };
    let otherwise = result.is_err();
    let response = match result {
        Ok(value) => json!({"version": 1, "id": id, "ok": true, "result": value}),
        Err(()) => json!({"version": 1, "id": id, "ok": false, "result": null, "error": {
            "code": OTHERWISE_ERROR_CODE, "message": "this worker runs no Lua",
            "labels": [], "context": [], "help": [], "command": null, "exit_status": null}}),
    };
    let text = json!({"kind": "response", "response": response}).to_string();
    decode_worker_frame(text.as_bytes())
        .ok()
        .map(|frame| (frame, otherwise))
}

/// The answer to a request sent as a frame payload, if it is one.
fn answer_to_payload(payload: &[u8]) -> Option<(WorkerFrame, bool)> {
    match decode_parent_frame(payload).ok()? {
        ParentFrame::Request { request } => {
            let value: Value = serde_json::from_slice(payload).ok()?;
            answer_with_kind(request.id, value.get("request")?.get("operation")?)
        }
        ParentFrame::HostResponse { .. } => None,
    }
}

/// What the simulated worker answers to the request in flight.
enum InFlight {
    Nothing,
    /// The contract's answer; `true` when it is the `invalid_command` one.
    Known(WorkerFrame, bool),
    /// Raw bytes the derivation cannot read: only `any_answer` is safe.
    Unknown,
}

/// `Ok` when a worker under the Lua-free contract passes `steps`; else why not.
pub fn judged_by_envelope(steps: &[Step]) -> Result<(), String> {
    let mut in_flight = InFlight::Nothing;
    let mut last_id: Option<u64> = None;
    for step in steps {
        match step {
            Step::Init(init) => {
                last_id = Some(init.id.unwrap_or(1));
                in_flight = InFlight::Nothing;
            }
            Step::Request(request) => {
                let id = request
                    .id
                    .unwrap_or_else(|| last_id.map_or(1, |last| last.saturating_add(1)));
                last_id = Some(id);
                in_flight = known(answer_with_kind(id, &substitute(&request.operation)));
            }
            Step::SendRequestRaw(bytes, id, _) => {
                last_id = Some(*id);
                in_flight = known(bytes.get(4..).and_then(answer_to_payload));
            }
            Step::InFlight(step) => {
                last_id = Some(step.id);
                in_flight = InFlight::Unknown;
            }
            Step::Send(value) => {
                if matches!(in_flight, InFlight::Unknown)
                    && let Ok(bytes) = serde_json::to_vec(&substitute(value))
                    && let Some(answer) = answer_to_payload(&bytes)
                {
                    in_flight = known(Some(answer));
                }
            }
            Step::SendText(text) => {
                if matches!(in_flight, InFlight::Unknown)
                    && let Some(answer) = answer_to_payload(expand(text).as_bytes())
                {
                    in_flight = known(Some(answer));
                }
            }
            Step::ExpectResponse(expect) => {
                check(expect, &in_flight)?;
                in_flight = InFlight::Nothing;
            }
            Step::ExpectHostCall(_) | Step::HostReply(_) => {
                return Err("it waits for a host call, which only guest code makes".to_owned());
            }
            Step::SendBytes(_)
            | Step::SendHeader(_)
            | Step::SendPadded(_)
            | Step::SendSlowly(_)
            | Step::SendRaw(_)
            | Step::Close(_)
            | Step::SleepMs(_)
            | Step::ExpectViolation(_)
            | Step::ExpectExit(_) => {}
        }
    }
    Ok(())
}

fn known(answer: Option<(WorkerFrame, bool)>) -> InFlight {
    answer.map_or(InFlight::Unknown, |(frame, otherwise)| {
        InFlight::Known(frame, otherwise)
    })
}

fn check(expect: &Expect, in_flight: &InFlight) -> Result<(), String> {
    match in_flight {
        InFlight::Nothing => Ok(()),
        InFlight::Known(_, true)
            if !expect.any_answer
                && !expect
                    .error_code
                    .as_ref()
                    .is_some_and(|codes| codes.contains(OTHERWISE_ERROR_CODE)) =>
        {
            Err("it judges what guest code does, not only the envelope".to_owned())
        }
        InFlight::Unknown if expect.any_answer => Ok(()),
        InFlight::Unknown => {
            Err("it expects more than an envelope from a request the runner cannot read".to_owned())
        }
        InFlight::Known(frame, _) => check_answer(expect, frame)
            .map_err(|detail| format!("a worker without Lua would fail it: {detail}")),
    }
}

/// Whether `case` (with its expanded `steps`) belongs to `--protocol-only`
/// runs: profile `protocol`, not tagged `sdk`, Lua-free (derived, unless
/// the case says `lua_free: false`).
pub fn protocol_only(case: &CaseData, steps: &[Step]) -> bool {
    case.profile() == crate::profile::Profile::Protocol
        && !case.tags.iter().any(|tag| tag == "sdk")
        && case.lua_free != Some(false)
        && judged_by_envelope(steps).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_return_of_a_decimal_integer_is_answered() {
        assert_eq!(returned_integer("return 42"), Some(42));
        assert_eq!(returned_integer("return -7"), Some(-7));
        assert_eq!(returned_integer("return 1+1"), None);
        assert_eq!(returned_integer("return  1"), None);
        assert_eq!(returned_integer("return 0x10"), None);
        assert_eq!(returned_integer("return -"), None);
        assert_eq!(returned_integer("return 99999999999999999999"), None);
        // SPEC §19.2: as Lua 5.4 reads them.
        assert_eq!(returned_integer("return 007"), Some(7));
        assert_eq!(returned_integer("return -0"), Some(0));
        assert_eq!(
            returned_integer("return 9223372036854775807"),
            Some(i64::MAX)
        );
        assert_eq!(
            returned_integer("return -9223372036854775807"),
            Some(-i64::MAX)
        );
        assert_eq!(returned_integer("return -9223372036854775808"), None);
        assert_eq!(returned_integer("return 9223372036854775808"), None);
        assert_eq!(returned_integer("return 1\n"), None);
        assert_eq!(returned_integer(" return 1"), None);
    }

    #[test]
    fn answers_follow_the_contract() {
        let ok = answer_to(3, &json!({"operation": "eval", "source": "return 5"})).unwrap();
        assert!(
            check_answer(
                &Expect {
                    result: Some(json!(5)),
                    ..Expect::default()
                },
                &ok
            )
            .is_ok()
        );
        let other = answer_to(
            4,
            &json!({"operation": "check", "source": "x", "source_name": "n"}),
        )
        .unwrap();
        let WorkerFrame::Response { response } = &other else {
            panic!("{other:?}")
        };
        assert_eq!(response.id, 4);
        assert_eq!(
            response.result.as_ref().unwrap_err().code.as_str(),
            OTHERWISE_ERROR_CODE
        );
    }

    #[test]
    fn lua_semantics_and_host_calls_are_not_lua_free() {
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m",
            "source": "return 1 + 1", "expect": {"result": 2}
        }))
        .unwrap();
        assert!(judged_by_envelope(&case.expanded_steps().unwrap()).is_err());
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m",
            "source": "return 7", "expect": {"result": 7}
        }))
        .unwrap();
        assert!(judged_by_envelope(&case.expanded_steps().unwrap()).is_ok());
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m",
            "source": "return 7", "host": [{"reply": {"error": {}}}], "expect": {"any_answer": true}
        }))
        .unwrap();
        assert!(judged_by_envelope(&case.expanded_steps().unwrap()).is_err());
        // "Some error" from guest code is a judgement of Lua.
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§15", "must": "m",
            "source": "return io", "expect": {"ok": false}
        }))
        .unwrap();
        assert!(judged_by_envelope(&case.expanded_steps().unwrap()).is_err());
        // Any answer (the request is read and answered with its id) is envelope.
        let case: CaseData = serde_json::from_value(json!({
            "name": "x", "spec": "§7", "must": "m",
            "operation": {"operation": "check", "source": "x", "source_name": "n"},
            "expect": {"any_answer": true}
        }))
        .unwrap();
        assert!(judged_by_envelope(&case.expanded_steps().unwrap()).is_ok());
    }
}
