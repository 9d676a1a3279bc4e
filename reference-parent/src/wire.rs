//! The parent's side of the wire: framing, strict decoding, session checks.
//!
//! Every byte the worker sends goes through the protocol crate's push
//! [`FrameDecoder`] (length checked before any allocation, buffer grown with
//! bytes actually received) and strict [`decode_worker_frame`]; every frame
//! the parent sends is encoded canonically and self-checked by the protocol
//! crate before it is written. On top, this module enforces the parent's
//! session rules (SPEC.md §9.4): one request in flight, strictly increasing
//! request ids, a response's id equal to the request in flight, host calls
//! only for the request in flight, only when process access was granted at
//! initialize, with call ids `1, 2, …` in order, at most
//! [`HOST_CALLS_PER_REQUEST_MAX`] per request, and at most one pending.
//! The first violation poisons the session for good.
//!
//! Results are re-validated per operation ([`OperationResult::decode`]).
//!
//! What this module is not: it does no I/O and knows no deadlines; the
//! worker handle moves bytes and owns time.

use quirl_lua_protocol::{
    CommandOutcome, ErrorKind, Feed, FrameDecoder, HOST_CALLS_PER_REQUEST_MAX, HostCall,
    HostResponse, Operation, OperationKind, OperationResult, ParentFrame, ProtocolError, Request,
    ShellError, WireFrame, WorkerFrame, decode_worker_frame,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Spawned; only `initialize` may be sent.
    Fresh,
    /// Initialized; no request in flight.
    Idle,
    /// Request `id` in flight, `calls` host calls made so far.
    Awaiting {
        id: u64,
        kind: OperationKind,
        calls: u32,
    },
    /// Host call `calls` of request `id` is pending; the parent owes the answer.
    Hosting {
        id: u64,
        kind: OperationKind,
        calls: u32,
    },
    /// A violation happened; nothing is accepted or sent any more.
    Poisoned,
}

/// The parent's protocol state for one worker.
pub(crate) struct Wire {
    decoder: FrameDecoder,
    /// Bytes read but not yet consumed by the decoder (after a frame end).
    pending: Vec<u8>,
    state: State,
    next_id: u64,
    process_enabled: bool,
}

impl Wire {
    /// A session for a worker that will be initialized with
    /// `process_enabled` (and whose policy allows processes, if true).
    pub(crate) fn new(process_enabled: bool) -> Self {
        Self {
            decoder: FrameDecoder::new(),
            pending: Vec::new(),
            state: State::Fresh,
            next_id: 1,
            process_enabled,
        }
    }

    /// Encode the next request (length prefix included).
    ///
    /// A refusal here (wrong state, or a request its peer would reject)
    /// sends nothing and leaves the session as it was.
    pub(crate) fn start_request(
        &mut self,
        operation: Operation,
    ) -> Result<(u64, Vec<u8>), ProtocolError> {
        let kind = operation.kind();
        let allowed = match self.state {
            State::Fresh => kind == OperationKind::Initialize,
            State::Idle => kind != OperationKind::Initialize,
            _ => false,
        };
        if !allowed {
            return Err(ProtocolError::new(
                ErrorKind::UnexpectedFrame,
                format!("a {} request cannot be sent now", kind.as_str()),
            ));
        }
        let id = self.next_id;
        let bytes = ParentFrame::Request {
            request: Request { id, operation },
        }
        .encode_framed()?;
        self.next_id = id.checked_add(1).ok_or_else(|| {
            ProtocolError::new(ErrorKind::IdentityMismatch, "request ids are exhausted")
        })?;
        self.state = State::Awaiting { id, kind, calls: 0 };
        Ok((id, bytes))
    }

    /// Encode the answer to the pending host call.
    pub(crate) fn host_response(
        &mut self,
        result: Result<CommandOutcome, ShellError>,
    ) -> Result<Vec<u8>, ProtocolError> {
        let State::Hosting { id, kind, calls } = self.state else {
            return Err(ProtocolError::new(
                ErrorKind::UnexpectedFrame,
                "no host call is pending",
            ));
        };
        let bytes = ParentFrame::HostResponse {
            response: HostResponse {
                request_id: id,
                call_id: calls,
                result,
            },
        }
        .encode_framed()?;
        self.state = State::Awaiting { id, kind, calls };
        Ok(bytes)
    }

    /// Give the session bytes read from the worker.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The worker's output ended: a violation if it ended inside a frame.
    pub(crate) fn end_of_stream(&mut self) -> Option<ProtocolError> {
        if let Err(error) = self.drain_into_decoder() {
            return Some(error);
        }
        self.decoder.finish().err()
    }

    /// Feed pending bytes that cannot complete a frame (used at end of stream).
    fn drain_into_decoder(&mut self) -> Result<(), ProtocolError> {
        while !self.pending.is_empty() {
            match self.decoder.feed(&self.pending)? {
                Feed::NeedMore => self.pending.clear(),
                Feed::Frame { consumed, .. } => {
                    self.pending.drain(..consumed);
                }
            }
        }
        Ok(())
    }

    /// The next complete frame, checked against the session, if any.
    pub(crate) fn next_incoming(&mut self) -> Result<Option<Incoming>, ProtocolError> {
        if self.state == State::Poisoned {
            return Err(ProtocolError::new(
                ErrorKind::SessionPoisoned,
                "the session failed earlier",
            ));
        }
        let result = self.next_incoming_unchecked();
        if result.is_err() {
            self.state = State::Poisoned;
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
        };
        let frame = decode_worker_frame(&payload)?;
        self.accept(frame).map(Some)
    }

    fn accept(&mut self, frame: WorkerFrame) -> Result<Incoming, ProtocolError> {
        let (id, kind, calls) = match self.state {
            State::Awaiting { id, kind, calls } => (id, kind, calls),
            State::Hosting { .. } => {
                return Err(ProtocolError::new(
                    ErrorKind::UnexpectedFrame,
                    "the worker sent a frame while its host call was pending",
                ));
            }
            State::Fresh | State::Idle | State::Poisoned => {
                return Err(ProtocolError::new(
                    ErrorKind::UnexpectedFrame,
                    "the worker sent a frame with no request in flight",
                ));
            }
        };
        match frame {
            WorkerFrame::Response { response } => {
                if response.id != id {
                    return Err(ProtocolError::new(
                        ErrorKind::IdentityMismatch,
                        format!(
                            "response id {} answers no request; request {id} is in flight",
                            response.id
                        ),
                    ));
                }
                let result = match response.result {
                    Ok(value) => Ok(OperationResult::decode(kind, &value)?),
                    Err(error) => Err(error),
                };
                self.state = match (&result, kind) {
                    // A worker that refused initialize cannot be used (§9.4).
                    (Err(_), OperationKind::Initialize) => State::Poisoned,
                    _ => State::Idle,
                };
                Ok(Incoming::Response(result))
            }
            WorkerFrame::HostCall { call } => {
                if !self.process_enabled {
                    return Err(ProtocolError::new(
                        ErrorKind::UnexpectedFrame,
                        "host call from a worker initialized without process access",
                    ));
                }
                if kind == OperationKind::Initialize {
                    return Err(ProtocolError::new(
                        ErrorKind::UnexpectedFrame,
                        "host call during initialize",
                    ));
                }
                if call.request_id != id {
                    return Err(ProtocolError::new(
                        ErrorKind::IdentityMismatch,
                        format!(
                            "host call for request {}; request {id} is in flight",
                            call.request_id
                        ),
                    ));
                }
                if calls >= HOST_CALLS_PER_REQUEST_MAX {
                    return Err(ProtocolError::new(
                        ErrorKind::HostCallLimit,
                        format!("more than {HOST_CALLS_PER_REQUEST_MAX} host calls in one request"),
                    ));
                }
                if call.call_id != calls + 1 {
                    return Err(ProtocolError::new(
                        ErrorKind::IdentityMismatch,
                        format!("host call id {}; expected {}", call.call_id, calls + 1),
                    ));
                }
                self.state = State::Hosting {
                    id,
                    kind,
                    calls: call.call_id,
                };
                Ok(Incoming::HostCall(call))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use quirl_lua_protocol::{Policy, frame_payload};

    fn initialized(process_enabled: bool) -> Wire {
        let mut wire = Wire::new(process_enabled);
        let policy = Policy::new(process_enabled, 1 << 20, 1000, 100).unwrap();
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
        let mut wire = Wire::new(false);
        assert!(
            wire.start_request(Operation::Eval { source: "x".into() })
                .is_err()
        );
        let mut wire = initialized(false);
        let policy = Policy::new(false, 1 << 20, 1000, 100).unwrap();
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
