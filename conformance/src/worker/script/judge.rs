//! Judging the worker: the expect steps (a response, a host call, the end
//! of the session after a violation, an exit) and the checks after the last
//! step (no extra frame, nothing on stdout, no process of its own); a
//! failure names the SPEC section the worker broke where one applies.

use super::interpret::{ANSWER_SLACK_MS, DEFAULT_EXIT_MS, Interpreter, StepResult};
use super::model::{ExitStep, Expect, HostCallExpect, OneOrMany, ViolationStep};
use crate::worker::conn::{Next, Received};
use quirl_lua_protocol::encode_worker_frame;
use quirl_lua_protocol::records::{OperationKind, OperationResult, ShellError, WorkerFrame};
use serde_json::Value;
use std::time::Duration;

impl Interpreter<'_> {
    pub(super) fn final_checks(&mut self) -> StepResult {
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

    pub(super) fn expect_response(&mut self, expect: &Expect) -> StepResult {
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

    pub(super) fn expect_host_call(&mut self, expect: &HostCallExpect) -> StepResult {
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

    pub(super) fn expect_violation(&mut self, step: &ViolationStep) -> StepResult {
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

    pub(super) fn expect_exit(&mut self, step: &ExitStep) -> StepResult {
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
        Ok(value) => check_success(expect, value),
        Err(error) => check_failure(expect, error),
    }
}

/// Check a success response's result against the expectation.
fn check_success(expect: &Expect, value: &Value) -> StepResult {
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

/// Check an error response's record against the expectation.
fn check_failure(expect: &Expect, error: &ShellError) -> StepResult {
    if expect.ok == Some(true) || expect.result.is_some() || expect.result_subset.is_some() {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use quirl_lua_protocol::decode_worker_frame;
    use serde_json::json;

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
}
