//! Frame payload codec: strict decoding and canonical encoding, per direction.
//!
//! A payload is the JSON text of one frame, without its length prefix.
//! Decoding runs the strict JSON rules, the schema of the direction and the
//! domain checks of every record. Encoding writes Quirl's compact canonical
//! form and refuses any frame a receiver would reject, so a sender can never
//! emit a frame its peer must reject.
//!
//! How the encoder knows: the frames of the hot path (every request except
//! `run`, `plugin_command` and `event`, every response, host call and host
//! response) are checked on the typed record before serializing, with the
//! same domain checks the decoder applies (source and error-record bounds,
//! the descriptor, host-call bounds, the JSON nesting of free-form values);
//! everything else a decoder checks is already guaranteed by the Rust types
//! (integer widths, `ok`/`result`/`error` agreement, a `Policy` that cannot
//! be built out of range, strings that serialize to valid escaped UTF-8).
//! The remaining frames, and free-form values nested deeper than 64
//! levels (`TYPED_VALUE_DEPTH_MAX`), are checked by decoding the written
//! payload exactly as the receiver will. `tests/typed_encode_check.rs`
//! holds the typed check to that reference (serialize, then decode), for
//! valid and broken records alike.

use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Validate, decode_document};
use crate::limits::{FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use crate::records::{HostResponse, Operation, ParentFrame, Policy, Response, WorkerFrame};
use serde::Serialize;
use serde_json::Value;

/// Decode a parent→worker payload (`request` or `host_response`).
pub fn decode_parent_frame(payload: &[u8]) -> Result<ParentFrame, ProtocolError> {
    decode_document(payload)
}

/// Decode a worker→parent payload (`response` or `host_call`).
pub fn decode_worker_frame(payload: &[u8]) -> Result<WorkerFrame, ProtocolError> {
    decode_document(payload)
}

/// Encode a parent→worker frame as its canonical compact JSON payload.
pub fn encode_parent_frame(frame: &ParentFrame) -> Result<Vec<u8>, ProtocolError> {
    encode_checked(frame, false, check_parent_frame, decode_parent_frame)
}

/// Encode a worker→parent frame as its canonical compact JSON payload.
pub fn encode_worker_frame(frame: &WorkerFrame) -> Result<Vec<u8>, ProtocolError> {
    encode_checked(frame, false, check_worker_frame, decode_worker_frame)
}

/// Free-form values nested at most this deep (arrays and objects) are
/// checked on the typed value; deeper ones by re-decoding. The frame
/// envelope adds at most three levels, far below
/// [`JSON_DEPTH_MAX`](crate::limits::JSON_DEPTH_MAX).
pub(crate) const TYPED_VALUE_DEPTH_MAX: usize = 64;

/// What the typed check of a frame established.
enum Checked {
    /// Every check the decoder applies holds.
    Valid,
    /// Not covered by the typed check: decode the payload to find out.
    Undecided,
}

fn check_parent_frame(frame: &ParentFrame) -> Result<Checked, ProtocolError> {
    match frame {
        ParentFrame::Request { request } => {
            check_operation(&request.operation).map_err(|e| e.at("operation").at("request"))
        }
        ParentFrame::HostResponse { response } => {
            check_host_response(response).map_err(|e| e.at("response"))
        }
    }
}

fn check_operation(operation: &Operation) -> Result<Checked, ProtocolError> {
    // Source bounds, the descriptor, deadline_ms >= 1: the decoder's checks.
    Validate::validate(operation)?;
    match operation {
        Operation::Initialize { policy, .. } => {
            // Always true for a `Policy` (its fields are private and every
            // constructor checks them); re-checked because it is cheap.
            Policy::new(policy.settings()).map_err(|e| e.at("policy"))?;
            Ok(Checked::Valid)
        }
        Operation::Eval { .. }
        | Operation::Check { .. }
        | Operation::LoadConfig { .. }
        | Operation::LoadPlugin { .. }
        | Operation::Test { .. } => Ok(Checked::Valid),
        Operation::RenderPrompt { context, .. }
        | Operation::Complete { context, .. }
        | Operation::Contribution { context, .. } => Ok(check_free_form(context)),
        Operation::Run { .. } | Operation::PluginCommand { .. } | Operation::Event { .. } => {
            Ok(Checked::Undecided)
        }
    }
}

fn check_host_response(response: &HostResponse) -> Result<Checked, ProtocolError> {
    // The decoder's order: the nested record first, then the call id.
    match &response.result {
        Ok(outcome) => outcome.validate().map_err(|e| e.at("outcome"))?,
        Err(error) => error.validate().map_err(|e| e.at("error"))?,
    }
    crate::records::check_call_id(response.call_id)?;
    Ok(Checked::Valid)
}

fn check_worker_frame(frame: &WorkerFrame) -> Result<Checked, ProtocolError> {
    match frame {
        WorkerFrame::Response { response } => {
            check_response(response).map_err(|e| e.at("response"))
        }
        WorkerFrame::HostCall { call } => {
            Validate::validate(call).map_err(|e| e.at("call"))?;
            Ok(Checked::Valid)
        }
    }
}

fn check_response(response: &Response) -> Result<Checked, ProtocolError> {
    match &response.result {
        Ok(value) => Ok(check_free_form(value)),
        Err(error) => {
            error.validate().map_err(|e| e.at("error"))?;
            Ok(Checked::Valid)
        }
    }
}

/// A free-form value is accepted by the decoder whatever it holds (serde's
/// numbers are finite, its maps have unique keys, its strings are UTF-8);
/// only its nesting is bounded.
fn check_free_form(value: &Value) -> Checked {
    if nesting_within(value, TYPED_VALUE_DEPTH_MAX) {
        Checked::Valid
    } else {
        Checked::Undecided
    }
}

/// Whether `value` nests at most `max` arrays/objects deep.
pub(crate) fn nesting_within(value: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = match value {
        Value::Array(_) | Value::Object(_) => vec![(value, 1)],
        _ => return true,
    };
    while let Some((value, depth)) = stack.pop() {
        if depth > max {
            return false;
        }
        let children: &mut dyn Iterator<Item = &Value> = match value {
            Value::Array(items) => &mut items.iter(),
            Value::Object(map) => &mut map.values(),
            _ => continue,
        };
        for child in children {
            if matches!(child, Value::Array(_) | Value::Object(_)) {
                stack.push((child, depth + 1));
            }
        }
    }
    true
}

/// Check, serialize, and (if the typed check could not decide) re-decode.
fn encode_checked<T: Serialize, D>(
    frame: &T,
    with_header: bool,
    check: impl FnOnce(&T) -> Result<Checked, ProtocolError>,
    decode: impl FnOnce(&[u8]) -> Result<D, ProtocolError>,
) -> Result<Vec<u8>, ProtocolError> {
    let checked = check(frame)?;
    let start = if with_header { FRAME_HEADER_BYTES } else { 0 };
    let mut out = Vec::with_capacity(256);
    out.resize(start, 0);
    serde_json::to_writer(&mut out, frame)
        .map_err(|error| ProtocolError::domain(format!("frame cannot be serialized: {error}")))?;
    let header = header_for(out.len() - start)?;
    if with_header {
        out[..FRAME_HEADER_BYTES].copy_from_slice(&header);
    }
    if let Checked::Undecided = checked {
        decode(&out[start..])?;
    }
    Ok(out)
}

/// Prefix a payload with its 4-byte big-endian length.
pub fn frame_payload(payload: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    let header = header_for(payload.len())?;
    let mut framed = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    framed.extend_from_slice(&header);
    framed.extend_from_slice(payload);
    Ok(framed)
}

fn header_for(length: usize) -> Result<[u8; FRAME_HEADER_BYTES], ProtocolError> {
    if length == 0 {
        return Err(ProtocolError::new(
            ErrorKind::EmptyFrame,
            "a frame payload cannot be empty",
        ));
    }
    if length > FRAME_BYTES_MAX {
        return Err(ProtocolError::new(
            ErrorKind::OversizedFrame,
            format!("frame payload of {length} bytes exceeds the limit of {FRAME_BYTES_MAX}"),
        ));
    }
    u32::try_from(length)
        .map(u32::to_be_bytes)
        .map_err(|_| ProtocolError::new(ErrorKind::OversizedFrame, "frame payload exceeds u32"))
}

/// A frame type of one direction: [`ParentFrame`] or [`WorkerFrame`].
pub trait WireFrame: Sized {
    /// Strictly decode a payload.
    fn decode(payload: &[u8]) -> Result<Self, ProtocolError>;
    /// Encode as a canonical payload (validated).
    fn encode(&self) -> Result<Vec<u8>, ProtocolError>;
    /// Encode as length prefix + canonical payload (validated), ready to write.
    fn encode_framed(&self) -> Result<Vec<u8>, ProtocolError>;
}

impl WireFrame for ParentFrame {
    fn decode(payload: &[u8]) -> Result<Self, ProtocolError> {
        decode_parent_frame(payload)
    }
    fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        encode_parent_frame(self)
    }
    fn encode_framed(&self) -> Result<Vec<u8>, ProtocolError> {
        encode_checked(self, true, check_parent_frame, decode_parent_frame)
    }
}

impl WireFrame for WorkerFrame {
    fn decode(payload: &[u8]) -> Result<Self, ProtocolError> {
        decode_worker_frame(payload)
    }
    fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        encode_worker_frame(self)
    }
    fn encode_framed(&self) -> Result<Vec<u8>, ProtocolError> {
        encode_checked(self, true, check_worker_frame, decode_worker_frame)
    }
}
