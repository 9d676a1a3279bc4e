//! A minimal worker without Lua, speaking the protocol on stdin/stderr.
//!
//! Contract (the conformance tool's tests rely on it):
//! - `initialize` is answered successfully;
//! - `eval` whose source is exactly `return <decimal integer>` is answered
//!   with that integer;
//! - every other request is answered with an error response, code
//!   `invalid_command`, saying the operation is not supported;
//! - exit status 0 on a clean end of input (SPEC §3.3), nonzero on any
//!   violation, without writing further frames (SPEC §9.6);
//! - frames go to stderr, nothing to stdout (SPEC §3.1).

use quirl_lua_protocol::WorkerEvent;
use quirl_lua_protocol::blocking::WorkerClient;
use quirl_lua_protocol::records::{ErrorCode, Operation, OperationResult, ShellError};
use std::io::{Read, Write};
use std::process::ExitCode;

/// The answer this worker gives, or `None` for an unsupported request.
fn answer(operation: &Operation) -> Option<OperationResult> {
    match operation {
        Operation::Initialize { .. } => Some(OperationResult::Null),
        Operation::Eval { source } => source
            .strip_prefix("return ")
            .filter(|digits| !digits.starts_with('+'))
            .and_then(|digits| digits.parse::<i64>().ok())
            // Lua 5.4 reads `-9223372036854775808` as a float (SPEC §19.2).
            .filter(|integer| *integer != i64::MIN)
            .map(|integer| OperationResult::Value(integer.into())),
        _ => None,
    }
}

fn unsupported(operation: &Operation) -> ShellError {
    ShellError::new(
        ErrorCode::InvalidCommand,
        format!(
            "operation `{}` is not supported by this worker",
            operation.kind().as_str()
        ),
    )
}

fn main() -> ExitCode {
    serve(std::io::stdin().lock(), std::io::stderr().lock())
}

/// Serve requests from `input` (stdin), frames to `output` (stderr).
pub fn serve(input: impl Read, output: impl Write) -> ExitCode {
    let mut worker = WorkerClient::new(input, output);
    loop {
        match worker.next_event() {
            Ok(Some(WorkerEvent::Request(request))) => {
                let operation = &request.operation;
                let result = answer(operation).ok_or_else(|| unsupported(operation));
                if worker.respond_or_error(result).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            Ok(None) => return ExitCode::SUCCESS, // clean end of input
            // A host response without a host call cannot be accepted by
            // the session, so anything else is a violation.
            Ok(Some(_)) | Err(_) => return ExitCode::FAILURE,
        }
    }
}
