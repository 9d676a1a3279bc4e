//! One request's exchange with a running worker, sans-IO (DESIGN §17.3,
//! §17.6): the steps every driver takes over the protocol crate's
//! [`ParentConnection`], with the time handed in.
//!
//! A driver's request loop is the same in every driver:
//!
//! 1. [`send`] queues the request (its deadline is the connection's
//!    too) and the driver writes `connection.take_outgoing()`;
//! 2. [`step`] says what to do next: return the result or the worker's
//!    error answer, run a host call, or read more bytes (fed with
//!    [`feed`]);
//! 3. after a host call the driver feeds whatever the worker sent while it
//!    was pending (it must have sent nothing, SPEC §9.3) and
//!    [`answer_host_call`] queues the answer, unless the deadline passed
//!    meanwhile (DESIGN §17.6: no answer goes out after the deadline).
//!
//! Any `Err` is a failure that ends the worker (kill → reap → drain,
//! SPEC §13.2), except from [`send`] when nothing was sent
//! ([`Error::worker_ended`] is false then).

use quirl_lua_protocol::ErrorContext;
use std::time::Instant;

use quirl_lua_protocol::records::{
    CommandOutcome, HostCall, Operation, OperationResult, ShellError,
};
use quirl_lua_protocol::{
    ErrorKind as ProtocolErrorKind, ParentConnection, ParentEvent, ProtocolError, SessionState,
};

use super::classify::{answered, from_protocol, rejected, violation};
use super::flight::Flight;
use crate::error::Error;

/// What a host answers to one host call (SPEC §6.7).
pub type HostAnswer = Result<CommandOutcome, ShellError>;

/// A request kept to be sent once more: after a `resource_limit` answer a
/// worker may retire (SPEC §13.1-a) just after the check before the next
/// request saw it alive. If it then turns out to have retired before
/// reading that request (§13.1-b), the request was not run, and goes to a
/// fresh worker instead of failing.
#[derive(Debug)]
pub(crate) struct Resend(Option<Operation>);

impl Resend {
    /// Keep `operation` when the worker behind `connection` may retire.
    pub(crate) fn keep(connection: &ParentConnection, operation: &Operation) -> Self {
        Resend(connection.may_have_retired().then(|| operation.clone()))
    }

    /// After the request failed: the request again when the worker retired
    /// before reading it (the driver ends that worker as retired and starts
    /// a fresh one), `None` when the failure stands.
    pub(crate) fn unread(self, connection: &ParentConnection) -> Option<Operation> {
        self.0
            .filter(|_| connection.state() == SessionState::Retired)
    }
}

/// What the driver does next for the request in flight.
#[derive(Debug)]
pub(crate) enum Step {
    /// The request succeeded: its result, re-validated for the operation.
    Result(OperationResult),
    /// The worker answered with an error record: a [`Guest`] error, or a
    /// [`Limit`] after which the worker is retired.
    ///
    /// [`Guest`]: crate::ErrorClass::Guest
    /// [`Limit`]: crate::ErrorClass::Limit
    Answered(Error),
    /// Run this host call, then [`answer_host_call`].
    HostCall(HostCall),
    /// Read more bytes from the worker and [`feed`] them.
    Read,
}

/// Queue `operation` on `connection` with its absolute `deadline`.
///
/// Refused before anything is queued (the caller's mistake, e.g. an
/// oversized source): an [`InvalidInput`](crate::ErrorClass::InvalidInput)
/// error, the worker untouched. Bytes the worker sent while no request was
/// in flight (fed before this call) are an `unexpected_frame` violation
/// (SPEC §9.2) that ends the worker.
pub(crate) fn send(
    connection: &mut ParentConnection,
    operation: Operation,
    now: Instant,
    deadline: Instant,
) -> Result<Flight, Error> {
    let flight = Flight {
        id: connection.next_request_id(),
        operation: operation.kind().as_str(),
        started: now,
        deadline,
    };
    match connection.request_with_deadline(operation, now, deadline) {
        Ok(id) => Ok(Flight { id, ..flight }),
        Err(error) if connection.poison_cause().is_some() => Err(violation(&error, &flight)
            .with_context("found while no request was in flight; the request was not sent")),
        Err(error) => Err(rejected(&error)),
    }
}

/// What to do next at `now` (see [`Step`]). An answer first seen at or
/// after the deadline is late: the parent's clock wins over the worker's
/// own wall-time answer (DESIGN §17.3).
pub(crate) fn step(
    connection: &mut ParentConnection,
    flight: &Flight,
    now: Instant,
) -> Result<Step, Error> {
    connection
        .handle_timeout(now)
        .map_err(|error| from_protocol(&error, flight, now))?;
    match connection.poll_event() {
        Ok(None) => Ok(Step::Read),
        Ok(Some(ParentEvent::Response {
            result: Ok(result), ..
        })) => Ok(Step::Result(result)),
        Ok(Some(ParentEvent::Response {
            result: Err(record),
            ..
        })) => Ok(Step::Answered(answered(record))),
        Ok(Some(ParentEvent::HostCall(call))) => Ok(Step::HostCall(call)),
        Ok(Some(other)) => Err(violation(
            &ProtocolError::new(
                ProtocolErrorKind::UnexpectedFrame,
                format!("an event this parent does not handle: {other:?}"),
            ),
            flight,
        )),
        Err(error) => Err(from_protocol(&error, flight, now)),
    }
}

/// Feed bytes the worker sent.
pub(crate) fn feed(
    connection: &mut ParentConnection,
    flight: &Flight,
    bytes: &[u8],
    now: Instant,
) -> Result<(), Error> {
    connection
        .feed(bytes)
        .map_err(|error| from_protocol(&error, flight, now))
}

/// Queue the answer to the pending host call, unless the deadline passed
/// while it ran (then the worker is killed without it, DESIGN §17.6). Bytes
/// the worker sent while its call was pending must have been fed first:
/// they are an `unexpected_frame` violation (SPEC §9.3). An outcome larger
/// than the call allowed is answered with a `resource_limit` record
/// instead (the protocol crate's `host_response_or_error`).
pub(crate) fn answer_host_call(
    connection: &mut ParentConnection,
    flight: &Flight,
    answer: HostAnswer,
    now: Instant,
) -> Result<(), Error> {
    connection
        .handle_timeout(now)
        .map_err(|error| from_protocol(&error, flight, now))?;
    connection
        .host_response_or_error(answer)
        .map(drop)
        .map_err(|error| from_protocol(&error, flight, now))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ErrorClass;
    use crate::supervision::limit::LimitKind;
    use quirl_lua_protocol::records::{ErrorCode, Policy};
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);

    fn frame(json: &str) -> Vec<u8> {
        quirl_lua_protocol::frame_payload(json.as_bytes()).unwrap()
    }

    /// A connection past `initialize`, its policy allowing host calls.
    fn ready(now: Instant) -> ParentConnection {
        let mut connection = ParentConnection::new();
        let policy = Policy::new(quirl_lua_protocol::records::PolicySettings {
            allow_process: true,
            memory_limit_bytes: 1 << 20,
            instruction_limit: 1_000,
            wall_time_ms: 1_000,
        })
        .unwrap();
        let flight = send(
            &mut connection,
            Operation::initialize(policy, None, true),
            now,
            now + SECOND,
        )
        .unwrap();
        connection.take_outgoing();
        feed(
            &mut connection,
            &flight,
            &frame(
                r#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#,
            ),
            now,
        )
        .unwrap();
        assert!(matches!(
            step(&mut connection, &flight, now).unwrap(),
            Step::Result(OperationResult::Null)
        ));
        connection
    }

    fn eval(connection: &mut ParentConnection, now: Instant) -> Flight {
        let flight = send(
            connection,
            Operation::Eval {
                source: "return 1".into(),
            },
            now,
            now + SECOND,
        )
        .unwrap();
        assert!(!connection.take_outgoing().is_empty());
        flight
    }

    #[test]
    fn a_result_arrives_in_any_chunking() {
        let now = Instant::now();
        let mut connection = ready(now);
        let flight = eval(&mut connection, now);
        let bytes =
            frame(r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":1}}"#);
        let (head, tail) = bytes.split_at(5);
        feed(&mut connection, &flight, head, now).unwrap();
        assert!(matches!(
            step(&mut connection, &flight, now).unwrap(),
            Step::Read
        ));
        feed(&mut connection, &flight, tail, now).unwrap();
        assert!(matches!(
            step(&mut connection, &flight, now).unwrap(),
            Step::Result(OperationResult::Value(value)) if value == serde_json::json!(1)
        ));
    }

    // DESIGN §17.3: an answer first seen at the deadline is late.
    #[test]
    fn an_answer_seen_at_the_deadline_is_a_deadline_failure() {
        let now = Instant::now();
        let mut connection = ready(now);
        let flight = eval(&mut connection, now);
        feed(
            &mut connection,
            &flight,
            &frame(
                r#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":null}}"#,
            ),
            now,
        )
        .unwrap();
        let error = step(&mut connection, &flight, now + SECOND).unwrap_err();
        assert_eq!(error.class(), ErrorClass::Deadline);
        assert_eq!(error.limit(), Some(LimitKind::Deadline));
    }

    #[test]
    fn a_limit_answer_names_its_kind() {
        let now = Instant::now();
        let mut connection = ready(now);
        let flight = eval(&mut connection, now);
        feed(
            &mut connection,
            &flight,
            &frame(r#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"resource_limit","message":"memory","labels":[],"context":["limit: memory"],"help":[],"command":null,"exit_status":null}}}"#),
            now,
        )
        .unwrap();
        let Step::Answered(error) = step(&mut connection, &flight, now).unwrap() else {
            panic!("expected an error answer");
        };
        assert_eq!(
            (error.class(), error.limit(), error.code()),
            (
                ErrorClass::Limit,
                Some(LimitKind::Memory),
                ErrorCode::ResourceLimit
            )
        );
    }

    // SPEC §13.1-a/b: after a limit answer, a request that met the
    // worker's retirement unread goes again; any other failure stands, and
    // no request is kept where the worker cannot retire.
    #[test]
    fn a_request_goes_again_only_when_a_retiring_worker_left_it_unread() {
        let now = Instant::now();
        let limit_answer = frame(
            r#"{"kind":"response","response":{"version":1,"id":2,"ok":false,"result":null,"error":{"code":"resource_limit","message":"memory","labels":[],"context":["limit: memory"],"help":[],"command":null,"exit_status":null}}}"#,
        );
        let next = Operation::Eval {
            source: "return 2".into(),
        };
        let after_limit = |now| {
            let mut connection = ready(now);
            let flight = eval(&mut connection, now);
            feed(&mut connection, &flight, &limit_answer, now).unwrap();
            assert!(matches!(
                step(&mut connection, &flight, now).unwrap(),
                Step::Answered(_)
            ));
            connection
        };

        let mut retired = after_limit(now);
        let resend = Resend::keep(&retired, &next);
        let flight = send(&mut retired, next.clone(), now, now + SECOND).unwrap();
        assert!(retired.end_of_stream().is_err(), "the request met the end");
        assert!(step(&mut retired, &flight, now).is_err());
        assert_eq!(resend.unread(&retired), Some(next.clone()));

        let mut violated = after_limit(now);
        let resend = Resend::keep(&violated, &next);
        let flight = send(&mut violated, next.clone(), now, now + SECOND).unwrap();
        feed(
            &mut violated,
            &flight,
            &frame(r#"{"kind":"nonsense"}"#),
            now,
        )
        .unwrap();
        assert!(step(&mut violated, &flight, now).is_err());
        assert_eq!(resend.unread(&violated), None);

        let mut healthy = ready(now);
        let resend = Resend::keep(&healthy, &next);
        let _ = send(&mut healthy, next, now, now + SECOND).unwrap();
        let _ = healthy.end_of_stream();
        assert_eq!(resend.unread(&healthy), None);
    }

    // SPEC §9.3, DESIGN §17.6.
    #[test]
    fn no_host_answer_goes_out_after_the_deadline() {
        let now = Instant::now();
        let mut connection = ready(now);
        let flight = eval(&mut connection, now);
        feed(
            &mut connection,
            &flight,
            &frame(r#"{"kind":"host_call","call":{"request_id":2,"call_id":1,"command":"echo hi","deadline_ms":100,"max_output_bytes":64}}"#),
            now,
        )
        .unwrap();
        assert!(matches!(
            step(&mut connection, &flight, now).unwrap(),
            Step::HostCall(_)
        ));
        let outcome = CommandOutcome {
            status: 0,
            stdout: Some("hi\n".into()),
            stderr: None,
        };
        let late = answer_host_call(&mut connection, &flight, Ok(outcome.clone()), now + SECOND)
            .unwrap_err();
        assert_eq!(late.class(), ErrorClass::Deadline);
        assert!(
            connection.take_outgoing().is_empty(),
            "an answer was queued"
        );
    }

    #[test]
    fn bytes_sent_while_a_host_call_is_pending_are_a_violation() {
        let now = Instant::now();
        let mut connection = ready(now);
        let flight = eval(&mut connection, now);
        feed(
            &mut connection,
            &flight,
            &frame(r#"{"kind":"host_call","call":{"request_id":2,"call_id":1,"command":"echo hi","deadline_ms":100,"max_output_bytes":64}}"#),
            now,
        )
        .unwrap();
        step(&mut connection, &flight, now).unwrap();
        feed(&mut connection, &flight, &[0, 0], now).unwrap();
        let error = answer_host_call(
            &mut connection,
            &flight,
            Err(ShellError::new(ErrorCode::Validation, "denied")),
            now,
        )
        .unwrap_err();
        assert_eq!(error.class(), ErrorClass::ProtocolViolation);
        assert_eq!(
            error.protocol_kind(),
            Some(ProtocolErrorKind::UnexpectedFrame)
        );
    }

    #[test]
    fn bytes_while_idle_refuse_the_request_as_a_violation() {
        let now = Instant::now();
        let mut connection = ready(now);
        connection.feed(&[0, 0, 0, 1]).unwrap();
        let error = send(
            &mut connection,
            Operation::Eval {
                source: "return 1".into(),
            },
            now,
            now + SECOND,
        )
        .unwrap_err();
        assert_eq!(error.class(), ErrorClass::ProtocolViolation);
        assert!(error.worker_ended());
    }

    #[test]
    fn a_request_refused_by_the_session_leaves_the_worker_untouched() {
        let now = Instant::now();
        let mut connection = ready(now);
        let oversized = "x".repeat(quirl_lua_protocol::limits::SOURCE_BYTES_MAX + 1);
        let error = send(
            &mut connection,
            Operation::Eval { source: oversized },
            now,
            now + SECOND,
        )
        .unwrap_err();
        assert_eq!(error.class(), ErrorClass::InvalidInput);
        assert!(!error.worker_ended());
        // The session still serves.
        eval(&mut connection, now);
    }
}
