//! Answering one host call (SPEC §6.6, DESIGN §16): a [`HostCall`] the session
//! machine already accepted in, a [`HostResponse`] out.
//!
//! This is the only seam between the worker handle and the process host:
//! the call's deadline becomes the earlier of its own `deadline_ms` and the
//! request's absolute deadline (DESIGN §16.6), and the outcome or the host's
//! error record goes straight into the response.

use std::time::{Duration, Instant};

use quirl_lua_protocol::limits::{FRAME_BYTES_MAX, HOST_COMMAND_BYTES_MAX, HOST_OUTPUT_BYTES_MAX};
use quirl_lua_protocol::records::{CommandOutcome, HostCall, HostResponse, ShellError};

use super::cancel::CancelSignal;
use super::command_language::COMMAND_BYTES_MAX;
use super::exec::{
    CommandOutcomeData, OUTCOME_ENCODED_BYTES_MAX, OUTPUT_BYTES_MAX, ProcessRequest, run_command,
};
use super::grants::ProcessHostConfig;

// The host's own bounds are the protocol's.
const _: () = assert!(COMMAND_BYTES_MAX == HOST_COMMAND_BYTES_MAX);
const _: () = assert!(OUTPUT_BYTES_MAX as u64 == HOST_OUTPUT_BYTES_MAX);
const _: () = assert!(OUTCOME_ENCODED_BYTES_MAX < FRAME_BYTES_MAX);

/// Answer one host call that the session machine has already accepted
/// (identity, call count and `process_enabled` checked).
///
/// The deadline is `min(now + call.deadline_ms, request_deadline)`. Every
/// failure, a denial included, becomes the response's error record; this
/// function never asks for the worker to be killed.
pub fn run_host_call(
    config: &ProcessHostConfig,
    call: &HostCall,
    request_deadline: Instant,
    cancel: &(impl CancelSignal + ?Sized),
) -> HostResponse {
    let request = ProcessRequest {
        command: call.command.clone(),
        deadline: call_deadline(call, Instant::now(), request_deadline),
        max_output_bytes: usize::try_from(call.max_output_bytes).unwrap_or(usize::MAX),
    };
    HostResponse {
        request_id: call.request_id,
        call_id: call.call_id,
        result: run_command(config, &request, cancel)
            .map(CommandOutcome::from)
            .map_err(ShellError::from),
    }
}

/// `min(arrived + deadline_ms, request_deadline)`; an unrepresentable sum
/// is treated as "no earlier than the request deadline".
pub fn call_deadline(call: &HostCall, arrived: Instant, request_deadline: Instant) -> Instant {
    arrived
        .checked_add(Duration::from_millis(call.deadline_ms))
        .map_or(request_deadline, |own| own.min(request_deadline))
}

impl From<CommandOutcomeData> for CommandOutcome {
    fn from(outcome: CommandOutcomeData) -> Self {
        CommandOutcome {
            status: outcome.status,
            stdout: Some(outcome.stdout),
            stderr: Some(outcome.stderr),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::cancel::Cancel;
    use crate::process_host::{Environment, Grants, ProcessAccess};
    use quirl_lua_protocol::encode_parent_frame;
    use quirl_lua_protocol::records::ErrorCode;
    use quirl_lua_protocol::records::ParentFrame;

    fn call(command: &str) -> HostCall {
        HostCall {
            request_id: 9,
            call_id: 1,
            command: command.to_owned(),
            deadline_ms: 10_000,
            max_output_bytes: 1_048_576,
        }
    }

    fn config() -> ProcessHostConfig {
        ProcessHostConfig::new(
            ProcessAccess {
                allow_process: true,
                process_enabled: true,
            },
            Grants::parse(["process.spawn:echo"]).unwrap(),
            Environment::empty().with("PATH", "/usr/bin:/bin").unwrap(),
            "/",
        )
        .unwrap()
    }

    fn encode(response: HostResponse) -> String {
        let bytes = encode_parent_frame(&ParentFrame::HostResponse { response }).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn answers_echo_hi_with_the_spec_example_bytes() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let response = run_host_call(&config(), &call("echo hi"), deadline, &Cancel::new());
        assert_eq!(
            encode(response),
            r#"{"kind":"host_response","response":{"request_id":9,"call_id":1,"outcome":{"status":0,"stdout":"hi\n","stderr":""}}}"#
        );
    }

    #[test]
    fn a_denied_call_is_an_error_record_that_validates() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let response = run_host_call(
            &config(),
            &call("cat /etc/passwd"),
            deadline,
            &Cancel::new(),
        );
        let error = response.result.clone().unwrap_err();
        assert_eq!(error.code, ErrorCode::Validation);
        error.validate().unwrap();
        assert!(encode(response).contains(
            r#""error":{"code":"validation","message":"capability denied: process.spawn:cat""#
        ));
    }

    #[test]
    fn a_rejected_form_is_invalid_argument_on_the_wire() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let response = run_host_call(&config(), &call("echo hi &"), deadline, &Cancel::new());
        let error = response.result.unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert!(error.message.contains("background"));
        error.validate().unwrap();
    }

    #[test]
    fn the_deadline_is_the_earlier_of_call_and_request() {
        let now = Instant::now();
        let mut short = call("x");
        short.deadline_ms = 5;
        assert_eq!(
            call_deadline(&short, now, now + Duration::from_secs(1)),
            now + Duration::from_millis(5)
        );
        let request = now + Duration::from_millis(2);
        assert_eq!(call_deadline(&short, now, request), request);
        let mut huge = call("x");
        huge.deadline_ms = u64::MAX;
        assert_eq!(call_deadline(&huge, now, request), request);
    }

    #[test]
    fn the_largest_admitted_outcome_fits_in_one_frame() {
        // Half of the encoded budget per stream, all in 6-byte escapes.
        let escaped = "\u{1}".repeat(OUTCOME_ENCODED_BYTES_MAX / 2 / 6);
        let response = HostResponse {
            request_id: u64::MAX,
            call_id: 16,
            result: Ok(CommandOutcome {
                status: i32::MIN,
                stdout: Some(escaped.clone()),
                stderr: Some(escaped),
            }),
        };
        let bytes = encode_parent_frame(&ParentFrame::HostResponse { response }).unwrap();
        assert!(bytes.len() <= FRAME_BYTES_MAX, "{}", bytes.len());
    }
}
