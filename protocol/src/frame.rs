//! Framing: the sans-IO push decoder and blocking read/write adapters.
//!
//! A frame is a 4-byte big-endian payload length followed by the payload.
//! The length is a promise, not a budget: it is checked (0 is
//! `empty_frame`, above the maximum is `oversized_frame`) before a single
//! payload byte is buffered, and the buffer then grows only with bytes that
//! actually arrived — geometrically, never beyond the declared length and
//! never beyond twice the bytes received (plus a small floor).

use crate::codec::WireFrame;
use crate::error::{ErrorKind, ProtocolError};
use crate::limits::{FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use std::io::{ErrorKind as IoErrorKind, Read, Write};

/// Smallest buffer the decoder allocates for a partial payload.
const MIN_BUFFER: usize = 4 * 1024;

/// What one call to [`FrameDecoder::feed`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feed {
    /// All input was consumed; the current frame is not complete yet.
    NeedMore,
    /// A frame completed after `consumed` bytes of the input; the rest of
    /// the input was not looked at and must be fed again.
    Frame {
        /// The complete payload (length prefix removed).
        payload: Vec<u8>,
        /// How many input bytes were consumed.
        consumed: usize,
    },
}

/// Sans-IO push decoder: feed it any chunking of a byte stream, get payloads.
///
/// Errors are sticky: after a failure every call returns the same error.
///
/// ```
/// use quirl_lua_protocol::{Feed, FrameDecoder};
///
/// let mut decoder = FrameDecoder::new();
/// let stream = [0, 0, 0, 2, b'{', b'}'];
/// assert_eq!(decoder.feed(&stream[..3]).unwrap(), Feed::NeedMore);
/// let Feed::Frame { payload, consumed } = decoder.feed(&stream[3..]).unwrap() else {
///     panic!("frame expected");
/// };
/// assert_eq!((payload.as_slice(), consumed), (&b"{}"[..], 3));
/// assert!(decoder.finish().is_ok()); // clean end of stream at a frame boundary
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    max_payload: usize,
    header: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    expected: Option<usize>,
    buffer: Vec<u8>,
    failed: Option<ProtocolError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder with the v1 payload limit ([`FRAME_BYTES_MAX`]).
    pub fn new() -> Self {
        Self::with_max_payload(FRAME_BYTES_MAX)
    }

    /// A decoder with a smaller payload limit (clamped to `1..=FRAME_BYTES_MAX`).
    pub fn with_max_payload(max_payload: usize) -> Self {
        Self {
            max_payload: max_payload.clamp(1, FRAME_BYTES_MAX),
            header: [0; FRAME_HEADER_BYTES],
            header_len: 0,
            expected: None,
            buffer: Vec::new(),
            failed: None,
        }
    }

    /// Whether no partial frame is buffered (a clean place for the stream to end).
    pub fn is_at_boundary(&self) -> bool {
        self.failed.is_none() && self.header_len == 0 && self.expected.is_none()
    }

    /// Bytes still needed to finish the current header or payload (at least 1).
    pub fn bytes_wanted(&self) -> usize {
        match self.expected {
            Some(length) => length - self.buffer.len(),
            None => FRAME_HEADER_BYTES - self.header_len,
        }
    }

    /// Bytes currently reserved for a partial payload.
    pub fn buffer_capacity(&self) -> usize {
        self.buffer.capacity()
    }

    fn fail(&mut self, error: ProtocolError) -> ProtocolError {
        self.buffer = Vec::new();
        self.failed = Some(error.clone());
        error
    }

    /// Consume input up to the end of at most one frame.
    pub fn feed(&mut self, input: &[u8]) -> Result<Feed, ProtocolError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let (mut consumed, length) = match self.expected {
            Some(length) => (0, length),
            None => match self.read_header(input)? {
                (_, None) => return Ok(Feed::NeedMore),
                (taken, Some(length)) => (taken, length),
            },
        };
        let rest = &input[consumed..];
        let needed = length - self.buffer.len();
        let take = needed.min(rest.len());
        if self.buffer.is_empty() && take == needed {
            let payload = rest[..take].to_vec();
            self.reset();
            return Ok(Feed::Frame {
                payload,
                consumed: consumed + take,
            });
        }
        let target = self.buffer.len() + take;
        if target > self.buffer.capacity() {
            let grown = target
                .max(self.buffer.capacity().saturating_mul(2))
                .max(MIN_BUFFER)
                .min(length);
            self.buffer.reserve_exact(grown - self.buffer.len());
        }
        self.buffer.extend_from_slice(&rest[..take]);
        consumed += take;
        if self.buffer.len() == length {
            let payload = std::mem::take(&mut self.buffer);
            self.reset();
            Ok(Feed::Frame { payload, consumed })
        } else {
            Ok(Feed::NeedMore)
        }
    }

    /// Take header bytes from `input`. Returns how many it took and, once
    /// the header is complete, the declared payload length, checked against
    /// the empty and oversized rules (SPEC §4.3).
    fn read_header(&mut self, input: &[u8]) -> Result<(usize, Option<usize>), ProtocolError> {
        let take = (FRAME_HEADER_BYTES - self.header_len).min(input.len());
        self.header[self.header_len..self.header_len + take].copy_from_slice(&input[..take]);
        self.header_len += take;
        if self.header_len < FRAME_HEADER_BYTES {
            return Ok((take, None));
        }
        let declared = u32::from_be_bytes(self.header);
        let length = usize::try_from(declared).unwrap_or(usize::MAX);
        if length == 0 {
            return Err(self.fail(ProtocolError::new(
                ErrorKind::EmptyFrame,
                "frame header declares an empty payload",
            )));
        }
        if length > self.max_payload {
            return Err(self.fail(ProtocolError::new(
                ErrorKind::OversizedFrame,
                format!(
                    "frame header declares {declared} bytes; the limit is {}",
                    self.max_payload
                ),
            )));
        }
        self.expected = Some(length);
        Ok((take, Some(length)))
    }

    fn reset(&mut self) {
        self.header_len = 0;
        self.expected = None;
        self.buffer = Vec::new();
    }

    /// Report the end of the stream: `Ok` at a frame boundary, otherwise
    /// `truncated_header` or `truncated_frame` (sticky).
    pub fn finish(&mut self) -> Result<(), ProtocolError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if self.expected.is_some() {
            let error = ProtocolError::new(
                ErrorKind::TruncatedFrame,
                format!(
                    "stream ended after {} of {} payload bytes",
                    self.buffer.len(),
                    self.expected.unwrap_or(0)
                ),
            );
            return Err(self.fail(error));
        }
        if self.header_len > 0 {
            let error = ProtocolError::new(
                ErrorKind::TruncatedHeader,
                format!("stream ended after {} of 4 header bytes", self.header_len),
            );
            return Err(self.fail(error));
        }
        Ok(())
    }
}

/// Read exactly one frame's payload from a blocking reader; `Ok(None)` on
/// a clean end of stream.
///
/// Never reads past the end of the frame, never reserves ahead of received
/// bytes, and fails with `truncated_header`/`truncated_frame` when the
/// stream ends inside a frame. A one-shot helper: its decoder lives for one
/// call, so if the reader fails mid-frame (including `WouldBlock` from a
/// non-blocking reader) the bytes of that frame read so far are lost. Keep
/// a [`blocking::FrameReader`](crate::blocking::FrameReader) or a client of
/// [`crate::blocking`] for a stream instead.
pub fn read_payload<R: Read>(reader: &mut R) -> Result<Option<Vec<u8>>, ProtocolError> {
    let mut decoder = FrameDecoder::new();
    let mut chunk = [0_u8; 16 * 1024];
    loop {
        let want = decoder.bytes_wanted().min(chunk.len());
        let read = match reader.read(&mut chunk[..want]) {
            Ok(read) => read,
            Err(error) if error.kind() == IoErrorKind::Interrupted => continue,
            Err(error) => return Err(ProtocolError::io("reading a frame", error)),
        };
        if read == 0 {
            decoder.finish()?;
            return Ok(None);
        }
        if let Feed::Frame { payload, .. } = decoder.feed(&chunk[..read])? {
            return Ok(Some(payload));
        }
    }
}

/// Read and strictly decode one frame; `Ok(None)` on a clean end of stream.
pub fn read_frame<F: WireFrame, R: Read>(reader: &mut R) -> Result<Option<F>, ProtocolError> {
    match read_payload(reader)? {
        Some(payload) => F::decode(&payload).map(Some),
        None => Ok(None),
    }
}

/// Encode (validated) and write one frame with a single write, then flush.
pub fn write_frame<F: WireFrame, W: Write>(writer: &mut W, frame: &F) -> Result<(), ProtocolError> {
    let bytes = frame.encode_framed()?;
    writer
        .write_all(&bytes)
        .and_then(|()| writer.flush())
        .map_err(|error| ProtocolError::io("writing a frame", error))
}
