//! Frame payload codec: strict decoding and canonical encoding, per direction.
//!
//! A payload is the JSON text of one frame, without its length prefix.
//! Decoding runs the strict JSON rules, the schema of the direction and the
//! domain checks of every record. Encoding writes Quirl's compact canonical
//! form and then checks the result exactly as a receiver would, so a sender
//! can never emit a frame its peer must reject.

use crate::error::{ErrorKind, ProtocolError};
use crate::json::decode_document;
use crate::limits::{FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use crate::records::{ParentFrame, WorkerFrame};
use serde::Serialize;

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
    let framed = encode_framed(frame, |payload| decode_parent_frame(payload).map(drop))?;
    Ok(framed[FRAME_HEADER_BYTES..].to_vec())
}

/// Encode a worker→parent frame as its canonical compact JSON payload.
pub fn encode_worker_frame(frame: &WorkerFrame) -> Result<Vec<u8>, ProtocolError> {
    let framed = encode_framed(frame, |payload| decode_worker_frame(payload).map(drop))?;
    Ok(framed[FRAME_HEADER_BYTES..].to_vec())
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

fn encode_framed<T: Serialize>(
    frame: &T,
    check: impl FnOnce(&[u8]) -> Result<(), ProtocolError>,
) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    serde_json::to_writer(&mut out, frame)
        .map_err(|error| ProtocolError::domain(format!("frame cannot be serialized: {error}")))?;
    let header = header_for(out.len() - FRAME_HEADER_BYTES)?;
    out[..FRAME_HEADER_BYTES].copy_from_slice(&header);
    check(&out[FRAME_HEADER_BYTES..])?;
    Ok(out)
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
        encode_framed(self, |payload| decode_parent_frame(payload).map(drop))
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
        encode_framed(self, |payload| decode_worker_frame(payload).map(drop))
    }
}
