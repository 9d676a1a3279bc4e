//! How a request ended, as the one typed [`Error`] of every driver
//! (DESIGN §17.5): the worker's answer, a deadline, a cancellation, a crash,
//! a violation, a dropped call. Drivers report what they observed
//! ([`Interrupt`], [`WorkerEnd`]); this file says what it means, and adds
//! a context line only for what was observed.

use std::fmt::Display;
use std::io;
use std::time::Instant;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{ErrorCode, ShellError};
use quirl_lua_protocol::{ErrorKind as ProtocolErrorKind, ParentConnection, ProtocolError};

use super::flight::Flight;
use super::limit::LimitKind;
use crate::error::{Error, ErrorClass};

/// What a driver observed that ended its wait for the worker before the
/// wanted progress (a write done, bytes read, a host answer).
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// The request's absolute deadline passed.
    Deadline,
    /// The worker's cancellation token fired.
    Cancelled,
    /// The worker process exited (its pidfd became readable) and its output
    /// held no more bytes.
    WorkerExited,
    /// The worker process exited while its host call was pending.
    WorkerExitedDuringHostCall,
    /// The worker's output reached end of file.
    OutputClosed,
    /// The worker's input is closed (`EPIPE`).
    InputClosed,
    /// An unexpected I/O error on a pipe or in the wait.
    Io(io::Error),
}

/// What the driver found when it ended a worker (kill → reap → drain,
/// SPEC §13.2): the exit status as text, and every cleanup problem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WorkerEnd {
    /// `exited with status 0`, `was killed by signal 9 (SIGKILL)`; `None`
    /// when the worker could not be reaped here.
    pub(crate) status: Option<String>,
    /// Whether it exited with status 0 by itself.
    pub(crate) exited_zero: bool,
    /// Cleanup problems, one sentence each.
    pub(crate) problems: Vec<String>,
}

/// A well-formed error response: [`ErrorClass::Limit`] when the worker
/// names a tripped limit (SPEC §11.4), [`ErrorClass::Guest`] otherwise.
pub(crate) fn answered(record: ShellError) -> Error {
    match LimitKind::from_record(&record) {
        Some(limit) => Error::from_record(ErrorClass::Limit, record).with_limit(limit),
        None => Error::from_record(ErrorClass::Guest, record),
    }
}

/// The worker broke the protocol (SPEC §13.2).
pub(crate) fn violation(error: &ProtocolError, flight: &Flight) -> Error {
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
    .with_context(format!("during {}", flight.describe()))
    .with_help("the worker was killed; the next call starts a fresh one")
}

/// The deadline passed before the answer (SPEC §10, DESIGN §17.3).
pub(crate) fn deadline(flight: &Flight) -> Error {
    Error::new(
        ErrorClass::Deadline,
        ErrorCode::ResourceLimit,
        "the Lua request exceeded its deadline",
    )
    .with_limit(LimitKind::Deadline)
    .with_context(format!(
        "deadline {} ms after {} started",
        flight.budget().as_millis(),
        flight.describe()
    ))
    .with_help(
        "reduce the work or give the request more time (the policy's wall_time_ms, or the call's deadline); the worker was killed",
    )
}

/// The caller's cancellation token fired mid-request.
pub(crate) fn cancelled(flight: &Flight, now: Instant) -> Error {
    Error::new(
        ErrorClass::Cancelled,
        ErrorCode::ResourceLimit,
        "the Lua request was cancelled",
    )
    .with_limit(LimitKind::Cancellation)
    .with_context(format!(
        "cancelled {} ms into {}",
        now.saturating_duration_since(flight.started).as_millis(),
        flight.describe()
    ))
    .with_help("the worker was killed; the next call starts a fresh one")
}

/// The caller dropped the call while its request was in flight (a
/// future dropped by a `select!` or a timeout): the worker was killed
/// when it was dropped.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) fn abandoned(flight: &Flight) -> Error {
    Error::new(
        ErrorClass::Cancelled,
        ErrorCode::ResourceLimit,
        "the Lua request was cancelled",
    )
    .with_limit(LimitKind::Cancellation)
    .with_context(format!(
        "the call of {} was dropped before its answer arrived",
        flight.describe()
    ))
    .with_help("the worker was killed when the call was dropped")
}

fn crashed(how: String) -> Error {
    Error::new(
        ErrorClass::WorkerCrashed,
        ErrorCode::Lua,
        "the Lua worker ended without answering",
    )
    .with_context(how)
    .with_help("the worker crashed or exited; the next call starts a fresh one")
}

fn pipes_failed(error: impl Display, flight: &Flight) -> Error {
    Error::new(
        ErrorClass::WorkerCrashed,
        ErrorCode::Lua,
        "the Lua worker's pipes failed",
    )
    .with_context(format!("{error} during {}", flight.describe()))
    .with_help("the worker was killed; the next call starts a fresh one")
}

/// What an [`Interrupt`] means for the request in flight. A stream that
/// ended inside a frame is a violation (SPEC §9.5); the connection tells.
pub(crate) fn interrupted(
    interrupt: Interrupt,
    connection: &mut ParentConnection,
    flight: &Flight,
    now: Instant,
) -> Error {
    match interrupt {
        Interrupt::Deadline => deadline(flight),
        Interrupt::Cancelled => cancelled(flight, now),
        Interrupt::WorkerExitedDuringHostCall => crashed(format!(
            "the worker process exited while its host call was pending, during {}",
            flight.describe()
        )),
        Interrupt::WorkerExited | Interrupt::OutputClosed | Interrupt::InputClosed => {
            if let Some(error) = stream_end_violation(connection) {
                return violation(&error, flight);
            }
            let how = match interrupt {
                Interrupt::WorkerExited => "the worker process exited",
                Interrupt::OutputClosed => "the worker closed its response stream",
                _ => "the worker closed its input",
            };
            crashed(format!("{how} during {}", flight.describe()))
        }
        Interrupt::Io(error) => pipes_failed(error, flight),
    }
}

/// What a failed connection call means, where the connection itself
/// reports the ending (its deadline, its cancellation, an ended stream).
pub(crate) fn from_protocol(error: &ProtocolError, flight: &Flight, now: Instant) -> Error {
    match error.kind() {
        ProtocolErrorKind::DeadlinePassed => deadline(flight),
        ProtocolErrorKind::Cancelled => cancelled(flight, now),
        // A retired worker and a stream that ended at a frame boundary
        // mid-request are the same crash to the caller.
        ProtocolErrorKind::UnexpectedEnd | ProtocolErrorKind::WorkerRetired => {
            crashed(format!("{} during {}", error.message(), flight.describe()))
        }
        ProtocolErrorKind::IoError => pipes_failed(error, flight),
        _ => violation(error, flight),
    }
}

/// The violation in how the worker's stream ended, if any (SPEC §9.5): a
/// stream cut inside a frame. An end at a frame boundary is no violation
/// here: mid-request it is the crash the caller reports.
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

/// The caller's request was refused before anything was sent: nothing
/// happened to the worker.
pub(crate) fn rejected(error: &ProtocolError) -> Error {
    Error::new(
        ErrorClass::InvalidInput,
        ErrorCode::Validation,
        "the request was rejected before it was sent",
    )
    .with_context(error.to_string())
}

/// The worker could not be started.
pub(crate) fn spawn_failed(command: impl Display, why: impl Display) -> Error {
    Error::new(
        ErrorClass::Spawn,
        ErrorCode::ProcessSpawn,
        "could not start the Lua worker",
    )
    .with_context(format!("worker command `{command}`: {why}"))
    .with_help("check the worker command (the program and arguments of WorkerCommand)")
}

/// How a failed `initialize` leaves a start.
#[derive(Debug)]
pub(crate) enum InitializeFailed {
    /// The worker answered with an error (or a tripped limit): it cannot
    /// serve; the driver ends it, and the start fails as a spawn failure.
    Refused(Error),
    /// The worker already ended (a crash, the startup deadline, a
    /// violation): the error stands; the driver drops what is left.
    Ended(Error),
}

/// Classify a failed `initialize` (DESIGN §17.4).
pub(crate) fn initialize_failed(error: Error) -> InitializeFailed {
    if !error.worker_ended() || error.class() == ErrorClass::Limit {
        InitializeFailed::Refused(
            error
                .with_class(ErrorClass::Spawn)
                .with_context("the worker refused initialize"),
        )
    } else {
        InitializeFailed::Ended(error.with_context("while initializing the worker"))
    }
}

/// A fresh worker could not load the plugin its slot serves again.
pub(crate) fn replay_failed(error: Error, source_name: &str) -> Error {
    let class = error.class();
    let error = if class.ends_worker() {
        error
    } else {
        error.with_class(ErrorClass::Spawn)
    };
    error.with_context(format!(
        "loading the plugin {source_name} into the fresh worker failed ({class})"
    ))
}

/// `error`, with what ending the worker `pid` showed: its exit status and
/// every cleanup problem (SPEC §13.2 step 6; cleanup problems are
/// appended, never replace the error).
pub(crate) fn with_end(error: Error, pid: u32, end: WorkerEnd) -> Error {
    let mut error = match end.status {
        Some(status) => error.with_context(format!("worker {pid} {status}")),
        None => error.with_context(format!("worker {pid} was not reaped here")),
    };
    for problem in end.problems {
        error = error.with_context(format!("cleanup: {problem}"));
    }
    error
}

/// Between calls (DESIGN §17.4): whether the worker has ended, from
/// whether its process has exited and what its stream held. Bytes between
/// calls are a violation (SPEC §9.2) that the next request reports: they
/// are fed to the connection here, so they cannot be lost, and the worker
/// counts as live until that request; a closed or failed stream means it
/// ended.
pub(crate) fn ended_between_calls(
    exited: bool,
    read: Result<Option<&[u8]>, Interrupt>,
    connection: &mut ParentConnection,
) -> bool {
    match read {
        Ok(None) => exited,
        Ok(Some(bytes)) => {
            let _ = connection.feed(bytes);
            false
        }
        Err(_) => true,
    }
}

/// A worker found ended before a request was sent: it retired after its
/// previous `resource_limit` answer (SPEC §13.1-b), or it died.
pub(crate) fn found_ended(retired: bool) -> Error {
    if retired {
        Error::new(
            ErrorClass::Limit,
            ErrorCode::ResourceLimit,
            "the Lua worker retired after its previous request's resource limit",
        )
    } else {
        Error::new(
            ErrorClass::WorkerCrashed,
            ErrorCode::Lua,
            "the Lua worker had ended before the request was sent",
        )
    }
}

/// The handle could not register with its cancellation token.
pub(crate) fn no_cancel_wake(error: impl Display) -> Error {
    Error::new(
        ErrorClass::Spawn,
        ErrorCode::ProcessSpawn,
        "could not create a cancellation wake descriptor",
    )
    .with_context(error.to_string())
}

/// No worker is started under a token that has fired.
pub(crate) fn cancelled_before_start() -> Error {
    Error::new(
        ErrorClass::Cancelled,
        ErrorCode::ResourceLimit,
        "the Lua worker's cancellation token has fired",
    )
    .with_limit(LimitKind::Cancellation)
    .with_worker_ended(false)
    .with_context("no worker is started under a cancelled token")
}

/// The cause recorded when the caller replaced a worker (`restart()`).
pub(crate) fn replaced_by_restart() -> Error {
    Error::new(
        ErrorClass::Unavailable,
        ErrorCode::Lua,
        "the worker was replaced by a restart",
    )
    .with_worker_ended(true)
}

/// What draining the response pipe after the kill found, if it was not
/// its clean end (SPEC §13.2 step 4): `Ok(true)` is end of file.
pub(crate) fn drain_problem(drained: std::io::Result<bool>, waited_ms: u128) -> Option<String> {
    match drained {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "the response pipe was still open {waited_ms} ms after the kill: a process outside the worker's process group holds it"
        )),
        Err(error) => Some(format!("draining the response pipe failed: {error}")),
    }
}

/// The error of a shutdown that did not end cleanly (every driver): the
/// worker's exit status, then each cleanup problem, in the order met.
pub(crate) fn unclean_exit(pid: u32, end: WorkerEnd) -> Error {
    let mut error = Error::new(
        ErrorClass::WorkerCrashed,
        ErrorCode::Lua,
        "the Lua worker did not exit cleanly",
    );
    if let Some(status) = end.status {
        error = error.with_context(format!("worker {pid} {status}"));
    }
    for problem in end.problems {
        error = error.with_context(format!("cleanup: {problem}"));
    }
    error
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn flight() -> Flight {
        let started = Instant::now();
        Flight {
            id: 4,
            operation: "eval",
            started,
            deadline: started + Duration::from_millis(200),
        }
    }

    #[test]
    fn an_answer_that_names_a_limit_is_a_limit_and_ends_the_worker() {
        let record = ShellError::new(ErrorCode::ResourceLimit, "instruction budget exhausted")
            .with_context("limit: instructions");
        let error = answered(record);
        assert_eq!(error.class(), ErrorClass::Limit);
        assert_eq!(error.limit(), Some(LimitKind::Instructions));
        assert!(error.worker_ended());
        let plain = answered(ShellError::new(ErrorCode::Lua, "boom"));
        assert_eq!(plain.class(), ErrorClass::Guest);
        assert_eq!(plain.limit(), None);
        assert!(!plain.worker_ended());
        // A byte bound names no VM limit: the worker keeps serving.
        let bound = answered(ShellError::new(
            ErrorCode::ResourceLimit,
            "too many segments",
        ));
        assert_eq!(bound.class(), ErrorClass::Guest);
    }

    #[test]
    fn the_parents_own_endings_name_their_limit() {
        let flight = flight();
        let late = deadline(&flight);
        assert_eq!(
            (late.class(), late.limit()),
            (ErrorClass::Deadline, Some(LimitKind::Deadline))
        );
        assert!(late.record().context[0].contains("deadline 200 ms after request 4 (eval)"));
        let now = flight.started + Duration::from_millis(30);
        let stopped = cancelled(&flight, now);
        assert_eq!(
            (stopped.class(), stopped.limit()),
            (ErrorClass::Cancelled, Some(LimitKind::Cancellation))
        );
        assert!(stopped.record().context[0].starts_with("cancelled 30 ms into"));
        assert_eq!(abandoned(&flight).class(), ErrorClass::Cancelled);
        // No CLI flag in a library message (the CLI adds its own help).
        assert!(!late.to_string().contains("--"));
        assert!(late.record().help.iter().all(|help| !help.contains("--")));
    }

    // DESIGN §17.4, SPEC §9.2: between calls a quiet stream defers to the
    // process's exit, a closed stream is an end, and bytes are a violation
    // kept for the next request, which reports it.
    #[test]
    fn between_calls_the_stream_and_the_exit_say_whether_the_worker_ended() {
        let mut connection = ParentConnection::new();
        assert!(!ended_between_calls(false, Ok(None), &mut connection));
        assert!(ended_between_calls(true, Ok(None), &mut connection));
        assert!(ended_between_calls(
            false,
            Err(Interrupt::OutputClosed),
            &mut connection
        ));
        let unsolicited: &[u8] = &[0, 0, 0, 2, b'{', b'}'];
        assert!(!ended_between_calls(
            true,
            Ok(Some(unsolicited)),
            &mut connection
        ));
        assert!(connection.poll_event().is_err(), "the bytes were kept");
    }

    // DESIGN §17.4: an `initialize` the worker answered with an error or a
    // limit is a refusal (a spawn failure); one the worker did not live
    // through keeps its class.
    #[test]
    fn a_failed_initialize_is_a_refusal_unless_the_worker_ended() {
        let refused = Error::new(ErrorClass::Guest, ErrorCode::Lua, "no");
        let InitializeFailed::Refused(error) = initialize_failed(refused) else {
            panic!("an error answer is a refusal");
        };
        assert_eq!(error.class(), ErrorClass::Spawn);
        assert!(
            error
                .record()
                .context
                .iter()
                .any(|c| c == "the worker refused initialize")
        );
        let limit = Error::new(ErrorClass::Limit, ErrorCode::ResourceLimit, "memory");
        assert!(matches!(
            initialize_failed(limit),
            InitializeFailed::Refused(e) if e.class() == ErrorClass::Spawn
        ));
        let crash = Error::new(ErrorClass::WorkerCrashed, ErrorCode::Lua, "gone");
        let InitializeFailed::Ended(error) = initialize_failed(crash) else {
            panic!("a crash is not a refusal");
        };
        assert_eq!(error.class(), ErrorClass::WorkerCrashed);
        assert!(
            error
                .record()
                .context
                .iter()
                .any(|c| c == "while initializing the worker")
        );
    }

    #[test]
    fn an_exit_during_a_host_call_is_a_crash_that_says_so() {
        let mut connection = ParentConnection::new();
        let error = interrupted(
            Interrupt::WorkerExitedDuringHostCall,
            &mut connection,
            &flight(),
            Instant::now(),
        );
        assert_eq!(error.class(), ErrorClass::WorkerCrashed);
        assert_eq!(
            error.record().context,
            ["the worker process exited while its host call was pending, during request 4 (eval)"]
        );
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_a_violation_not_a_crash() {
        let mut connection = ParentConnection::new();
        connection
            .request(quirl_lua_protocol::records::Operation::initialize(
                quirl_lua_protocol::records::Policy::quirl_config_profile(),
                None,
                false,
            ))
            .unwrap();
        connection.feed(&[0, 0, 0, 9, b'{']).unwrap();
        let error = interrupted(
            Interrupt::OutputClosed,
            &mut connection,
            &flight(),
            Instant::now(),
        );
        assert_eq!(error.class(), ErrorClass::ProtocolViolation, "{error}");
        assert_eq!(
            error.protocol_kind(),
            Some(ProtocolErrorKind::TruncatedFrame)
        );
    }

    #[test]
    fn cleanup_problems_are_appended_after_the_status() {
        let error = with_end(
            deadline(&flight()),
            77,
            WorkerEnd {
                status: Some("was killed by signal 9 (SIGKILL)".to_owned()),
                exited_zero: false,
                problems: vec!["the pipe stayed open".to_owned()],
            },
        );
        let context = &error.record().context;
        assert_eq!(context[1], "worker 77 was killed by signal 9 (SIGKILL)");
        assert_eq!(context[2], "cleanup: the pipe stayed open");
        assert_eq!(error.class(), ErrorClass::Deadline);
    }
}
