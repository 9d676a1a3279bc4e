//! Answering the worker's host calls (`quirl.process.run`).
//!
//! The worker never starts processes; it asks the parent with a host call.
//! This module is the seam between the worker handle and the proxied process
//! host ([`crate::process_host`]): it turns an accepted host call into a
//! [`ProcessRequest`] whose deadline is the earlier of the call's own
//! `deadline_ms` and the request's absolute deadline, runs it, and turns the
//! result into a command outcome or an error record for the guest (a Lua
//! error). Host calls that break the protocol (wrong ids, a 17th call, a call
//! while process access is disabled) never reach this module: the worker
//! handle treats them as violations first.

use std::time::{Duration, Instant};

use quirl_lua_protocol::{CommandOutcome, ErrorCode, HostCall, ShellError};

use crate::process_host::{Cancel, HostError, ProcessHostConfig, ProcessRequest, run_command};

/// Run one accepted host call and produce its outcome or error record.
#[allow(
    clippy::result_large_err,
    reason = "the value goes straight into HostResponse::result, which has this shape"
)]
pub(crate) fn run_host_call(
    call: &HostCall,
    config: &ProcessHostConfig,
    request_deadline: Instant,
    cancel: &Cancel,
) -> Result<CommandOutcome, ShellError> {
    let deadline = Instant::now()
        .checked_add(Duration::from_millis(call.deadline_ms))
        .map_or(request_deadline, |own| own.min(request_deadline));
    let request = ProcessRequest {
        command: call.command.clone(),
        deadline,
        max_output_bytes: usize::try_from(call.max_output_bytes).unwrap_or(usize::MAX),
    };
    match run_command(config, &request, cancel) {
        Ok(outcome) => Ok(CommandOutcome {
            status: outcome.status,
            stdout: Some(outcome.stdout),
            stderr: Some(outcome.stderr),
        }),
        Err(error) => Err(error_record(&error)),
    }
}

fn error_record(error: &HostError) -> ShellError {
    let code = match error.code().as_str() {
        "invalid_argument" => ErrorCode::InvalidArgument,
        "resource_limit" => ErrorCode::ResourceLimit,
        "process_spawn" => ErrorCode::ProcessSpawn,
        "validation" => ErrorCode::Validation,
        _ => ErrorCode::Io,
    };
    let mut record = ShellError::new(code, error.message());
    record.context = error.context().to_vec();
    record.help = error.help().to_vec();
    record.exit_status = error.exit_status();
    record
}
