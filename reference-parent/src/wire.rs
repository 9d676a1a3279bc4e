//! The parent's use of the wire protocol: framing, encoding, session checks.
//!
//! TEMPORARY stand-in until the `protocol` crate's decoder and parent session
//! land: a minimal framer and loose JSON checks so the supervision machinery
//! can be exercised. Every protocol decision of the parent goes through this
//! one module, so swapping it for the protocol crate touches nothing else.

use crate::shim::{ErrorCode, ErrorKind, ProtocolError, ShellError};
use serde_json::{Value, json};

const FRAME_BYTES_MAX: usize = 5_242_880;
const HOST_CALLS_MAX: u32 = 16;

/// A frame from the worker, after the session checked it.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// The response to the request in flight: its result or guest error.
    Response(Result<Value, ShellError>),
    /// A host call for the request in flight.
    HostCall(HostCall),
}

/// A host call the session accepted (ids checked, within the per-request budget).
#[derive(Debug, Clone)]
#[allow(
    dead_code,
    reason = "command, deadline and output cap are read by the process host (issue 5)"
)]
pub(crate) struct HostCall {
    pub(crate) request_id: u64,
    pub(crate) call_id: u32,
    pub(crate) command: String,
    pub(crate) deadline_ms: u64,
    pub(crate) max_output_bytes: u64,
}

/// The parent's protocol state for one worker.
pub(crate) struct Wire {
    buffer: Vec<u8>,
    next_id: u64,
    in_flight: Option<u64>,
    host_calls: u32,
    host_pending: bool,
    poisoned: bool,
}

fn violation(kind: ErrorKind, message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(kind, message)
}

impl Wire {
    pub(crate) fn new() -> Self {
        Self {
            buffer: Vec::new(),
            next_id: 1,
            in_flight: None,
            host_calls: 0,
            host_pending: false,
            poisoned: false,
        }
    }

    /// Encode the next request; the session then awaits its response.
    pub(crate) fn start_request(
        &mut self,
        operation: Value,
    ) -> Result<(u64, Vec<u8>), ProtocolError> {
        if self.poisoned || self.in_flight.is_some() {
            return Err(violation(
                ErrorKind::UnexpectedFrame,
                "a request is already in flight",
            ));
        }
        let id = self.next_id;
        let frame =
            json!({"kind": "request", "request": {"version": 1, "id": id, "operation": operation}});
        let bytes = frame_bytes(&frame)?;
        self.next_id += 1;
        self.in_flight = Some(id);
        self.host_calls = 0;
        Ok((id, bytes))
    }

    /// Encode the answer to the pending host call.
    pub(crate) fn host_response(
        &mut self,
        call: &HostCall,
        result: Result<Value, Box<ShellError>>,
    ) -> Result<Vec<u8>, ProtocolError> {
        if !self.host_pending {
            return Err(violation(
                ErrorKind::UnexpectedFrame,
                "no host call is pending",
            ));
        }
        let response = match result {
            Ok(outcome) => {
                json!({"request_id": call.request_id, "call_id": call.call_id, "outcome": outcome})
            }
            Err(error) => json!({"request_id": call.request_id, "call_id": call.call_id, "error": {
                "code": error.code.as_str(), "message": error.message, "labels": [], "context": error.context, "help": error.help, "command": null, "exit_status": null}}),
        };
        self.host_pending = false;
        frame_bytes(&json!({"kind": "host_response", "response": response}))
    }

    /// Give the session bytes read from the worker.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The worker's output ended: a violation if it ended inside a frame.
    pub(crate) fn end_of_stream(&self) -> Option<ProtocolError> {
        match self.buffer.len() {
            0 => None,
            1..4 => Some(violation(
                ErrorKind::TruncatedHeader,
                "stream ended inside a frame header",
            )),
            n => Some(violation(
                ErrorKind::TruncatedFrame,
                format!("stream ended after {} payload bytes of a frame", n - 4),
            )),
        }
    }

    /// The next complete frame, checked against the session, if any.
    pub(crate) fn next_incoming(&mut self) -> Result<Option<Incoming>, ProtocolError> {
        let result = self.next_incoming_inner();
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn next_incoming_inner(&mut self) -> Result<Option<Incoming>, ProtocolError> {
        if self.poisoned {
            return Err(violation(ErrorKind::SessionPoisoned, "session is poisoned"));
        }
        let Some(header) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let mut length = [0_u8; 4];
        length.copy_from_slice(header);
        let length = u32::from_be_bytes(length) as usize;
        if length == 0 {
            return Err(violation(ErrorKind::EmptyFrame, "empty frame"));
        }
        if length > FRAME_BYTES_MAX {
            return Err(violation(
                ErrorKind::OversizedFrame,
                format!("frame declares {length} bytes; the limit is {FRAME_BYTES_MAX}"),
            ));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let payload: Vec<u8> = self.buffer.drain(..4 + length).skip(4).collect();
        let frame: Value = serde_json::from_slice(&payload)
            .map_err(|e| violation(ErrorKind::MalformedJson, e.to_string()))?;
        let Some(in_flight) = self.in_flight else {
            return Err(violation(
                ErrorKind::UnexpectedFrame,
                "frame with no request in flight",
            ));
        };
        if self.host_pending {
            return Err(violation(
                ErrorKind::UnexpectedFrame,
                "frame while a host call is pending",
            ));
        }
        match frame.get("kind").and_then(Value::as_str) {
            Some("response") => {
                let response = &frame["response"];
                if response["version"] != json!(1) {
                    return Err(violation(
                        ErrorKind::BadVersion,
                        format!("version {}", response["version"]),
                    ));
                }
                if response["id"] != json!(in_flight) {
                    return Err(violation(
                        ErrorKind::IdentityMismatch,
                        format!("response id {} for request {in_flight}", response["id"]),
                    ));
                }
                let ok = response["ok"].as_bool();
                let has_error = response.get("error").is_some_and(|e| !e.is_null());
                self.in_flight = None;
                match (ok, has_error) {
                    (Some(true), false) => {
                        Ok(Some(Incoming::Response(Ok(response["result"].clone()))))
                    }
                    (Some(false), true) if response["result"].is_null() => {
                        let error = &response["error"];
                        let code = match error["code"].as_str() {
                            Some("lua") => ErrorCode::Lua,
                            Some("resource_limit") => ErrorCode::ResourceLimit,
                            Some("validation") => ErrorCode::Validation,
                            _ => ErrorCode::Lua,
                        };
                        let mut record =
                            ShellError::new(code, error["message"].as_str().unwrap_or_default());
                        if let Some(context) = error["context"].as_array() {
                            record.context = context
                                .iter()
                                .filter_map(|c| c.as_str().map(str::to_owned))
                                .collect();
                        }
                        Ok(Some(Incoming::Response(Err(record))))
                    }
                    _ => Err(violation(
                        ErrorKind::InconsistentResponse,
                        "ok, result and error disagree",
                    )),
                }
            }
            Some("host_call") => {
                let call = &frame["call"];
                let request_id = call["request_id"].as_u64().unwrap_or(u64::MAX);
                let call_id = call["call_id"]
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .unwrap_or(u32::MAX);
                if self.host_calls == HOST_CALLS_MAX && request_id == in_flight {
                    return Err(violation(ErrorKind::HostCallLimit, "17th host call"));
                }
                if request_id != in_flight || call_id != self.host_calls + 1 {
                    return Err(violation(
                        ErrorKind::IdentityMismatch,
                        format!("host call ({request_id}, {call_id}) during request {in_flight}"),
                    ));
                }
                self.host_calls += 1;
                self.host_pending = true;
                Ok(Some(Incoming::HostCall(HostCall {
                    request_id,
                    call_id,
                    command: call["command"].as_str().unwrap_or_default().to_owned(),
                    deadline_ms: call["deadline_ms"].as_u64().unwrap_or(0),
                    max_output_bytes: call["max_output_bytes"].as_u64().unwrap_or(0),
                })))
            }
            _ => Err(violation(ErrorKind::UnknownVariant, "unknown frame kind")),
        }
    }
}

fn frame_bytes(frame: &Value) -> Result<Vec<u8>, ProtocolError> {
    let payload =
        serde_json::to_vec(frame).map_err(|e| violation(ErrorKind::DomainBounds, e.to_string()))?;
    if payload.len() > FRAME_BYTES_MAX {
        return Err(violation(ErrorKind::OversizedFrame, "request too large"));
    }
    let mut bytes = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
        .to_vec();
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}
