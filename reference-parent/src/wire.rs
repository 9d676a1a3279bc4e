//! The parent's side of the wire: framing, strict decoding, session checks.
//!
//! Every byte the worker sends goes through the protocol crate's push
//! [`FrameDecoder`] (length checked before any allocation, buffer grown with
//! bytes actually received), strict decoding, and the protocol crate's
//! [`ParentSession`] (SPEC.md §9.4): one request in flight, strictly
//! increasing ids, a response's id equal to the request in flight, host
//! calls only for the request in flight with call ids `1, 2, …` in order, at
//! most [`HOST_CALLS_PER_REQUEST_MAX`] per request and at most one pending,
//! and every result re-validated for its operation. Every frame the parent
//! sends is checked by the same session and encoded canonically.
//!
//! The session also refuses host calls unless both the policy allows
//! processes and `initialize` enabled them: unlike Quirl, whose parent runs
//! host calls from any worker, such a call is a violation here. The first
//! violation poisons the session for good.
//!
//! What this module is not: it does no I/O and knows no deadlines; the
//! worker handle moves bytes and owns time.

use quirl_lua_protocol::{
    CommandOutcome, ErrorKind, Feed, FrameDecoder, HOST_CALLS_PER_REQUEST_MAX, HostCall, Operation,
    OperationResult, ParentEvent, ParentSession, ProtocolError, ShellError, WireFrame, WorkerFrame,
};

/// A frame from the worker that the session accepted.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// The response to the request in flight: its re-validated result, or
    /// the guest's error record.
    Response(Result<OperationResult, ShellError>),
    /// A host call for the request in flight.
    HostCall(HostCall),
}

/// The parent's protocol state for one worker.
pub(crate) struct Wire {
    decoder: FrameDecoder,
    /// Bytes read but not yet consumed by the decoder (after a frame end).
    pending: Vec<u8>,
    session: ParentSession,
    poisoned: Option<ProtocolError>,
}

impl Wire {
    /// A session for a new worker; `initialize` fixes whether it may send
    /// host calls (policy `allow_process` and `process_enabled` both true).
    pub(crate) fn new() -> Self {
        Self {
            decoder: FrameDecoder::new(),
            pending: Vec::new(),
            session: ParentSession::new(),
            poisoned: None,
        }
    }

    /// Whether no worker bytes are buffered (nothing received since the last
    /// complete frame).
    pub(crate) fn is_quiet(&self) -> bool {
        self.pending.is_empty() && self.decoder.is_at_boundary()
    }

    /// The id the next request will carry.
    pub(crate) fn next_request_id(&self) -> u64 {
        self.session.next_request_id()
    }

    /// Check and encode the next request (length prefix included).
    pub(crate) fn start_request(
        &mut self,
        operation: Operation,
    ) -> Result<(u64, Vec<u8>), ProtocolError> {
        self.session.request(operation)
    }

    /// Check and encode the answer to the pending host call.
    pub(crate) fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Vec<u8>, ProtocolError> {
        self.session.host_response(result)
    }

    /// Give the session bytes read from the worker.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The worker's output ended: a violation if it ended inside a frame.
    pub(crate) fn end_of_stream(&mut self) -> Option<ProtocolError> {
        while !self.pending.is_empty() {
            match self.decoder.feed(&self.pending) {
                Err(error) => return Some(error),
                Ok(Feed::NeedMore) => self.pending.clear(),
                Ok(Feed::Frame { consumed, .. }) => {
                    self.pending.drain(..consumed);
                }
                Ok(_) => self.pending.clear(),
            }
        }
        self.decoder.finish().err()
    }

    /// The next complete frame, checked against the session, if any.
    pub(crate) fn next_incoming(&mut self) -> Result<Option<Incoming>, ProtocolError> {
        if let Some(cause) = &self.poisoned {
            return Err(ProtocolError::new(
                ErrorKind::SessionPoisoned,
                format!("the session failed earlier: {cause}"),
            ));
        }
        let result = self.next_incoming_unchecked();
        if let Err(error) = &result {
            self.poisoned = Some(error.clone());
        }
        result
    }

    fn next_incoming_unchecked(&mut self) -> Result<Option<Incoming>, ProtocolError> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let payload = match self.decoder.feed(&self.pending)? {
            Feed::NeedMore => {
                self.pending.clear();
                return Ok(None);
            }
            Feed::Frame { payload, consumed } => {
                self.pending.drain(..consumed);
                payload
            }
            _ => return Ok(None),
        };
        let frame = WorkerFrame::decode(&payload)?;
        Ok(Some(match self.session.receive(frame)? {
            ParentEvent::Response { result, .. } => Incoming::Response(result),
            ParentEvent::HostCall(call) => Incoming::HostCall(call),
            other => {
                return Err(ProtocolError::new(
                    ErrorKind::UnexpectedFrame,
                    format!("an event this parent does not know: {other:?}"),
                ));
            }
        }))
    }
}

const _: () = assert!(HOST_CALLS_PER_REQUEST_MAX == 16);

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use quirl_lua_protocol::{Policy, PolicySettings, frame_payload};

    fn initialized(process_enabled: bool) -> Wire {
        let mut wire = Wire::new();
        let policy = Policy::new(PolicySettings {
            allow_process: process_enabled,
            memory_limit_bytes: 1 << 20,
            instruction_limit: 1000,
            wall_time_ms: 100,
        })
        .unwrap();
        let (id, _) = wire
            .start_request(Operation::initialize(policy, None, process_enabled))
            .unwrap();
        wire.feed(&frame_payload(format!(r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":null}}}}"#).as_bytes()).unwrap());
        assert!(matches!(
            wire.next_incoming().unwrap(),
            Some(Incoming::Response(Ok(OperationResult::Null)))
        ));
        wire
    }

    fn eval(wire: &mut Wire) -> u64 {
        wire.start_request(Operation::Eval {
            source: "return 1".to_owned(),
        })
        .unwrap()
        .0
    }

    fn feed_json(wire: &mut Wire, json: &str) {
        wire.feed(&frame_payload(json.as_bytes()).unwrap());
    }

    #[test]
    fn only_initialize_may_be_sent_first_and_only_once() {
        let mut wire = Wire::new();
        assert!(
            wire.start_request(Operation::Eval { source: "x".into() })
                .is_err()
        );
        let mut wire = initialized(false);
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 1 << 20,
            instruction_limit: 1000,
            wall_time_ms: 100,
        })
        .unwrap();
        assert!(
            wire.start_request(Operation::initialize(policy, None, false))
                .is_err()
        );
    }

    #[test]
    fn request_ids_strictly_increase() {
        let mut wire = initialized(false);
        let first = eval(&mut wire);
        feed_json(
            &mut wire,
            &format!(
                r#"{{"kind":"response","response":{{"version":1,"id":{first},"ok":true,"result":1}}}}"#
            ),
        );
        wire.next_incoming().unwrap().unwrap();
        assert!(eval(&mut wire) > first);
    }

    #[test]
    fn a_second_request_is_refused_while_one_is_in_flight() {
        let mut wire = initialized(false);
        eval(&mut wire);
        let error = wire
            .start_request(Operation::Eval { source: "x".into() })
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnexpectedFrame);
    }

    #[test]
    fn frames_split_across_reads_and_two_frames_in_one_read_are_accepted() {
        let mut wire = initialized(true);
        let id = eval(&mut wire);
        let call = frame_payload(format!(r#"{{"kind":"host_call","call":{{"request_id":{id},"call_id":1,"command":"echo","deadline_ms":1,"max_output_bytes":1}}}}"#).as_bytes()).unwrap();
        for byte in &call {
            assert!(wire.next_incoming().unwrap().is_none());
            wire.feed(std::slice::from_ref(byte));
        }
        assert!(matches!(
            wire.next_incoming().unwrap(),
            Some(Incoming::HostCall(_))
        ));
        wire.host_response(Ok(CommandOutcome {
            status: 0,
            stdout: None,
            stderr: None,
        }))
        .unwrap();
        let mut two = frame_payload(format!(r#"{{"kind":"host_call","call":{{"request_id":{id},"call_id":2,"command":"echo","deadline_ms":1,"max_output_bytes":1}}}}"#).as_bytes()).unwrap();
        two.extend(frame_payload(format!(r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":1}}}}"#).as_bytes()).unwrap());
        wire.feed(&two);
        assert!(matches!(
            wire.next_incoming().unwrap(),
            Some(Incoming::HostCall(_))
        ));
        // The second frame arrives while the host call is pending: a violation.
        let error = wire.next_incoming().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnexpectedFrame);
    }

    #[test]
    fn host_calls_need_both_the_policy_and_initialize() {
        for (allow_process, process_enabled) in [(false, true), (true, false), (true, true)] {
            let mut wire = Wire::new();
            let policy = Policy::new(PolicySettings {
                allow_process,
                memory_limit_bytes: 1 << 20,
                instruction_limit: 1000,
                wall_time_ms: 100,
            })
            .unwrap();
            let (id, _) = wire
                .start_request(Operation::initialize(policy, None, process_enabled))
                .unwrap();
            feed_json(
                &mut wire,
                &format!(
                    r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":null}}}}"#
                ),
            );
            wire.next_incoming().unwrap().unwrap();
            let id = eval(&mut wire);
            feed_json(
                &mut wire,
                &format!(
                    r#"{{"kind":"host_call","call":{{"request_id":{id},"call_id":1,"command":"echo","deadline_ms":1,"max_output_bytes":1}}}}"#
                ),
            );
            let incoming = wire.next_incoming();
            if allow_process && process_enabled {
                assert!(matches!(incoming, Ok(Some(Incoming::HostCall(_)))));
            } else {
                assert_eq!(incoming.unwrap_err().kind(), ErrorKind::UnexpectedFrame);
            }
        }
    }

    #[test]
    fn a_violation_poisons_the_session_for_good() {
        let mut wire = initialized(false);
        eval(&mut wire);
        feed_json(
            &mut wire,
            r#"{"kind":"response","response":{"version":1,"id":999,"ok":true,"result":1}}"#,
        );
        assert_eq!(
            wire.next_incoming().unwrap_err().kind(),
            ErrorKind::IdentityMismatch
        );
        assert_eq!(
            wire.next_incoming().unwrap_err().kind(),
            ErrorKind::SessionPoisoned
        );
    }

    #[test]
    fn results_are_revalidated_per_operation() {
        let mut wire = initialized(false);
        let (id, _) = wire
            .start_request(Operation::Test {
                source: "x".into(),
                source_name: "t".into(),
            })
            .unwrap();
        feed_json(
            &mut wire,
            &format!(
                r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":"three"}}}}"#
            ),
        );
        assert!(wire.next_incoming().is_err());
    }

    #[test]
    fn end_of_stream_inside_a_frame_is_truncation() {
        let mut wire = initialized(false);
        eval(&mut wire);
        wire.feed(&[0, 0, 0, 10, b'{']);
        assert!(wire.next_incoming().unwrap().is_none());
        assert_eq!(
            wire.end_of_stream().map(|e| e.kind()),
            Some(ErrorKind::TruncatedFrame)
        );
        let mut clean = initialized(false);
        assert!(clean.end_of_stream().is_none());
    }
}
