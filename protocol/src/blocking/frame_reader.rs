//! [`FrameReader`]: frames without a session over a `std::io::Read`.

use super::{READ_CHUNK_BYTES, read_some};
use crate::connection::FrameInbox;
use crate::error::ProtocolError;
use std::io::Read;

/// A persistent frame reader without a session: [`FrameInbox`] over a
/// `std::io::Read`, for tools that must see frames a session would refuse
/// (see [`FrameInbox`]). Partial frames and bytes after a frame are kept
/// between calls and across errors such as `WouldBlock`.
#[derive(Debug)]
pub struct FrameReader<R> {
    inbox: FrameInbox,
    reader: R,
    buffer: Box<[u8]>,
}

impl<R: Read> FrameReader<R> {
    /// A reader at the start of a stream.
    pub fn new(reader: R) -> Self {
        Self {
            inbox: FrameInbox::new(),
            reader,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    /// The next payload; `Ok(None)` at a clean end of stream, a truncation
    /// kind if the stream ended inside a frame.
    pub fn next_payload(&mut self) -> Result<Option<Vec<u8>>, ProtocolError> {
        loop {
            if let Some(payload) = self.inbox.next_payload()? {
                return Ok(Some(payload));
            }
            if self.inbox.is_ended() {
                return Ok(None);
            }
            let read = read_some(&mut self.reader, &mut self.buffer)?;
            if read == 0 {
                self.inbox.finish()?;
                return Ok(None);
            }
            self.inbox.feed(&self.buffer[..read])?;
        }
    }

    /// The buffered input.
    pub fn inbox(&self) -> &FrameInbox {
        &self.inbox
    }

    /// The reader back (buffered bytes are dropped).
    pub fn into_inner(self) -> R {
        self.reader
    }
}
