//! Answering the worker's host calls (`quirl.process.run`).
//!
//! The worker never starts processes; it asks the parent with a host call.
//! This module is the seam between the worker handle and the proxied process
//! host (issue 5, `process_host/`). Until that host is wired in, every host
//! call is answered with an error record, which the guest sees as an ordinary
//! Lua error. Host calls that break the protocol (wrong ids, a 17th call, a
//! call while process access is disabled) never reach this module: the worker
//! handle treats them as violations first.

use std::time::Instant;

use crate::cancel::CancelToken;
use crate::shim::{ErrorCode, ShellError};
use crate::wire::HostCall;

/// Run one accepted host call and produce its outcome or error record.
pub(crate) fn run_host_call(
    call: &HostCall,
    grants: &[String],
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<serde_json::Value, Box<ShellError>> {
    let _ = (grants, deadline, cancel);
    let mut error = ShellError::new(ErrorCode::ProcessSpawn, "process host not available");
    error.command = Some(call.command.clone());
    error.context.push(format!(
        "host call {} of request {}",
        call.call_id, call.request_id
    ));
    error
        .help
        .push("this build of the parent cannot run processes for Lua code yet".to_owned());
    Err(Box::new(error))
}
