//! What a failed exchange of the async worker is, as a typed [`Error`]
//! (DESIGN §17.5): a deadline, a cancellation, a crash, a violation, or a
//! call whose future was dropped mid-request.

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;
use quirl_lua_protocol::{ErrorKind as ProtocolErrorKind, ProtocolError};

use crate::error::{Error, ErrorClass};
use crate::worker::Flight;
use crate::worker::request::violation;

/// The error of a call whose future was dropped while its request was in
/// flight: the worker's state is unknown, so it is killed.
pub(super) fn abandoned(flight: Option<Flight>) -> Error {
    let what = flight.map_or_else(
        || "a request".to_owned(),
        |flight| format!("request {} ({})", flight.id, flight.operation),
    );
    Error::new(
        ErrorClass::Cancelled,
        ErrorCode::ResourceLimit,
        "the Lua request was cancelled",
    )
    .with_context(format!(
        "the future of {what} was dropped before its answer arrived"
    ))
    .with_help("the worker was killed; start a new one (restart)")
}

/// The error class of a failed exchange (DESIGN §17.5).
pub(super) fn classify(error: &ProtocolError, stream_ended: bool, flight: Flight) -> Error {
    let budget = flight
        .deadline
        .saturating_duration_since(flight.started)
        .as_millis();
    let during = format!("request {} ({})", flight.id, flight.operation);
    match error.kind() {
        _ if error.is_timed_out() => Error::new(
            ErrorClass::Deadline,
            ErrorCode::ResourceLimit,
            "the Lua request exceeded its deadline",
        )
        .with_context(format!("deadline {budget} ms after {during} started"))
        .with_help("reduce the work or raise the wall time; the worker was killed"),
        ProtocolErrorKind::Cancelled => Error::new(
            ErrorClass::Cancelled,
            ErrorCode::ResourceLimit,
            "the Lua request was cancelled",
        )
        .with_context(format!(
            "cancelled {} ms into {during}",
            flight.started.elapsed().as_millis()
        ))
        .with_help("the worker was killed; start a new one"),
        // The adapter's "stream ended before the response" is `invalid_use`
        // on an ended stream; a retired worker and a stream that ended at a
        // frame boundary mid-request are the same crash to the caller.
        ProtocolErrorKind::UnexpectedEnd | ProtocolErrorKind::WorkerRetired => {
            crashed(&format!("{} during {during}", error.message()))
        }
        ProtocolErrorKind::InvalidUse if stream_ended => crashed(&format!(
            "the worker closed its response stream during {during}"
        )),
        ProtocolErrorKind::IoError => Error::new(
            ErrorClass::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker's pipes failed",
        )
        .with_context(format!("{error} during {during}"))
        .with_help("the worker was killed; start a new one"),
        _ => violation(error, flight),
    }
}

fn crashed(how: &str) -> Error {
    Error::new(
        ErrorClass::WorkerCrashed,
        ErrorCode::Lua,
        "the Lua worker ended without answering",
    )
    .with_context(how.to_owned())
    .with_help("the worker crashed or exited; start a new one")
}
