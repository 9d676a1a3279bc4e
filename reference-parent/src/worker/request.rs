//! One request's exchange with a running worker (DESIGN §17.3, §17.6): the
//! silence check before it, the request loop with its host calls, and the
//! mapping of every way it can end to a typed [`Error`].

use std::time::Instant;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, HostCall, OperationResult};
use quirl_lua_protocol::{
    ErrorKind as ProtocolErrorKind, ParentConnection, ParentEvent, ProtocolError,
};

use super::{Flight, Live};
use crate::child_process::transport::{Interrupt, Transport, Watch};
use crate::error::{Error, ErrorClass};
use crate::process_host::{Cancel, ProcessHostConfig, run_host_call};

/// Before a request is sent the worker must have said nothing since its last
/// response: a frame (or part of one) that arrived while no request was in
/// flight is an `unexpected_frame` violation, and a closed stream is a crash
/// noticed before any work is sent. One non-blocking `read` (usually
/// `EAGAIN`).
pub(super) fn check_idle(live: &mut Live, flight: Flight) -> Result<(), Error> {
    let Live {
        transport,
        connection,
        ..
    } = live;
    check_quiet(
        transport,
        connection,
        flight,
        "while no request was in flight",
    )
}

/// Fail with `unexpected_frame` if the worker sent anything (bytes that
/// arrived now, or bytes left over from an earlier read) at a moment when
/// it must be silent: between requests, or while its host call is pending
/// (SPEC §9.2, §9.3).
fn check_quiet(
    transport: &mut Transport,
    connection: &mut ParentConnection,
    flight: Flight,
    when: &str,
) -> Result<(), Error> {
    let arrived = match transport.read_available() {
        Ok(None) => 0,
        Ok(Some(bytes)) => {
            connection
                .feed(bytes)
                .map_err(|error| violation(&error, flight))?;
            bytes.len()
        }
        Err(interrupt) => return Err(interrupted(interrupt, connection, flight)),
    };
    // Bytes may also be left over from the read that carried the last
    // frame.
    if arrived == 0 && connection.is_quiet() {
        return Ok(());
    }
    let error = match connection.poll_event() {
        Err(error) => error,
        Ok(_) => ProtocolError::new(
            ProtocolErrorKind::UnexpectedFrame,
            format!("the worker sent bytes {when}"),
        ),
    };
    Err(violation(&error, flight))
}

/// What a request waits on besides the worker, borrowed from the handle.
#[derive(Clone, Copy)]
pub(super) struct Waiting<'a> {
    pub(super) cancel: &'a Cancel,
    pub(super) cancel_wake: std::os::fd::BorrowedFd<'a>,
    pub(super) process_host: &'a ProcessHostConfig,
}

/// The request loop. `Ok(Ok)` = result, `Ok(Err)` = guest error (worker
/// healthy), `Err` = failure that must kill and poison.
pub(super) fn run_request(
    live: &mut Live,
    waiting: Waiting<'_>,
    flight: Flight,
) -> Result<Result<OperationResult, Error>, Error> {
    let Live {
        process,
        transport,
        connection,
        ..
    } = live;
    let watch = Watch {
        deadline: flight.deadline,
        cancel: waiting.cancel,
        cancel_wake: waiting.cancel_wake,
        exit: process.exit_fd(),
    };
    transport
        .write_all(&connection.take_outgoing(), watch)
        .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
    loop {
        let event = loop {
            match connection.poll_event() {
                Ok(Some(event)) => break event,
                Ok(None) => {}
                Err(error) => return Err(violation(&error, flight)),
            }
            let chunk = transport
                .read_chunk(watch)
                .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
            connection
                .feed(chunk)
                .map_err(|error| violation(&error, flight))?;
        };
        match event {
            ParentEvent::Response {
                result: Ok(value), ..
            } => return Ok(Ok(value)),
            ParentEvent::Response {
                result: Err(record),
                ..
            } => {
                return Ok(Err(Error::guest(record)));
            }
            ParentEvent::HostCall(call) => {
                answer_host_call(transport, connection, waiting, watch, flight, &call)?;
            }
            other => {
                let error = ProtocolError::new(
                    ProtocolErrorKind::UnexpectedFrame,
                    format!("an event this parent does not handle: {other:?}"),
                );
                return Err(violation(&error, flight));
            }
        }
    }
}

/// The violation in how the worker's stream ended, if any (SPEC §9.5): a
/// stream cut inside a frame. An end at a frame boundary is no violation
/// here: mid-request (`unexpected_end`) it is the crash the caller reports.
fn stream_end_violation(connection: &mut ParentConnection) -> Option<ProtocolError> {
    loop {
        match connection.poll_event() {
            // Every complete frame was handled before the read that ended
            // the stream; one arriving with the end changes nothing.
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(error) => return Some(error),
        }
    }
    match connection.end_of_stream() {
        // `worker_retired` (SPEC §13.1-b) is an end at a frame boundary
        // too: the caller's retirement check reports it.
        Err(error)
            if !matches!(
                error.kind(),
                ProtocolErrorKind::UnexpectedEnd | ProtocolErrorKind::WorkerRetired
            ) =>
        {
            Some(error)
        }
        _ => None,
    }
}

fn describe_flight(flight: Flight) -> String {
    format!("request {} ({})", flight.id, flight.operation)
}

pub(super) fn violation(error: &ProtocolError, flight: Flight) -> Error {
    let code = if error.kind() == ProtocolErrorKind::OversizedFrame {
        ErrorCode::ResourceLimit
    } else {
        ErrorCode::Validation
    };
    Error::new(
        ErrorClass::ProtocolViolation,
        code,
        "the Lua worker violated the protocol",
    )
    .with_protocol_kind(error.kind())
    .with_context(format!("protocol error: {error}"))
    .with_context(format!("during {}", describe_flight(flight)))
    .with_help("the worker was killed; report this if it is the reference worker")
}

fn interrupted(interrupt: Interrupt, connection: &mut ParentConnection, flight: Flight) -> Error {
    let budget = flight
        .deadline
        .saturating_duration_since(flight.started)
        .as_millis();
    match interrupt {
        Interrupt::Deadline => Error::new(
            ErrorClass::Deadline,
            ErrorCode::ResourceLimit,
            "the Lua request exceeded its deadline",
        )
        .with_context(format!(
            "deadline {budget} ms after {} started",
            describe_flight(flight)
        ))
        .with_help("reduce the work or raise --wall-time-ms; the worker was killed"),
        Interrupt::Cancelled => Error::new(
            ErrorClass::Cancelled,
            ErrorCode::ResourceLimit,
            "the Lua request was cancelled",
        )
        .with_context(format!(
            "cancelled {} ms into {}",
            flight.started.elapsed().as_millis(),
            describe_flight(flight)
        ))
        .with_help("the worker was killed; start a new one"),
        Interrupt::WorkerExited | Interrupt::OutputClosed | Interrupt::InputClosed => {
            if let Some(error) = stream_end_violation(connection) {
                return violation(&error, flight);
            }
            let how = match interrupt {
                Interrupt::WorkerExited => "the worker process exited",
                Interrupt::OutputClosed => "the worker closed its response stream",
                _ => "the worker closed its input",
            };
            Error::new(
                ErrorClass::WorkerCrashed,
                ErrorCode::Lua,
                "the Lua worker ended without answering",
            )
            .with_context(format!("{how} during {}", describe_flight(flight)))
            .with_help("the worker crashed or exited; start a new one")
        }
        Interrupt::Io(error) => Error::new(
            ErrorClass::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker's pipes failed",
        )
        .with_context(format!("{error} during {}", describe_flight(flight)))
        .with_help("the worker was killed; start a new one"),
    }
}

/// Run one host call inside the request's deadline (DESIGN §17.6) and send
/// its answer, unless the call's end also ended the request.
fn answer_host_call(
    transport: &mut Transport,
    connection: &mut ParentConnection,
    waiting: Waiting<'_>,
    watch: Watch<'_>,
    flight: Flight,
    call: &HostCall,
) -> Result<(), Error> {
    let answer = run_host_call(waiting.process_host, call, flight.deadline, waiting.cancel).result;
    // A cancellation or deadline that ended the command also ends the request.
    if waiting.cancel.is_cancelled() {
        return Err(interrupted(Interrupt::Cancelled, connection, flight));
    }
    if Instant::now() >= flight.deadline {
        return Err(interrupted(Interrupt::Deadline, connection, flight));
    }
    // While its host call is pending the worker must send nothing.
    check_quiet(
        transport,
        connection,
        flight,
        "while its host call was pending",
    )?;
    connection
        .host_response(answer)
        .map_err(|error| violation(&error, flight))?;
    transport
        .write_all(&connection.take_outgoing(), watch)
        .map_err(|interrupt| interrupted(interrupt, connection, flight))?;
    Ok(())
}
