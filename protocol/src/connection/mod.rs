//! Sans-IO connections: one per role, owning the frame decoder, the session,
//! the unconsumed input and the bytes still to be written.
//!
//! A connection performs no I/O. The caller moves bytes, the connection
//! does everything else, in the style of `rustls` and `quinn-proto`:
//!
//! - **bytes in**: [`feed`](ParentConnection::feed) whatever the transport
//!   delivered, in any chunking (SPEC §3.1): a frame split over many reads,
//!   several frames in one read, a length prefix split across reads;
//! - **events out**: [`poll_event`](ParentConnection::poll_event) until it
//!   returns `Ok(None)`; each event is a frame the session accepted
//!   ([`ParentEvent`] for the parent, [`WorkerEvent`] for the worker);
//! - **sends**: typed methods (`request`, `host_response`; `respond`,
//!   `host_call`) check the session state, encode canonically and append
//!   the framed bytes to the outgoing buffer;
//! - **bytes out**: write [`outgoing`](ParentConnection::outgoing) and
//!   report what was written with
//!   [`consume_outgoing`](ParentConnection::consume_outgoing) (partial
//!   writes of non-blocking transports work), or
//!   [`take_outgoing`](ParentConnection::take_outgoing) everything;
//! - **end of input**: [`end_of_stream`](ParentConnection::end_of_stream)
//!   applies SPEC §9.5 for the role and state.
//!
//! Three kinds of failure, told apart by [`ErrorKind`]:
//!
//! - a **violation** by the peer (bad framing, bad JSON, a frame the state
//!   does not allow, a stream cut inside a frame or mid-request) poisons
//!   the connection for good (SPEC §9.6); every later call fails with
//!   `session_poisoned`;
//! - a **mistake of the caller** that wrote nothing (a second
//!   `initialize`, a request while one is in flight, a response with
//!   nothing in flight, …) is [`ErrorKind::InvalidUse`]; the session stays
//!   healthy and nothing is sent;
//! - a frame that cannot be **encoded** (too large, a result of the wrong
//!   shape) is reported with its codec sub-kind; nothing is sent and the
//!   state is unchanged (SPEC §9.3). A worker answers such a request with
//!   an error record instead: see [`WorkerConnection::respond_or_error`].
//!
//! The blocking and async adapters ([`crate::blocking`], and `tokio_io`
//! behind the `tokio` feature) drive these connections over real streams.

mod parent;
mod worker;

pub use parent::ParentConnection;
pub use worker::{HostCommand, Responded, WorkerConnection, WorkerEvent};

#[cfg(doc)]
use crate::error::ErrorKind;
#[cfg(doc)]
use crate::session::ParentEvent;

use crate::error::ProtocolError;
use crate::frame::{Feed, FrameDecoder};

/// Unconsumed input is compacted once this many bytes at its front were read.
const COMPACT_AFTER_BYTES: usize = 64 * 1024;

/// The input half of a connection, without a session: bytes in (any
/// chunking), complete payloads out, truncation checked at the end.
///
/// Both connections are built on it. Use it directly only where frames
/// must be seen that a session would refuse: a conformance runner that
/// provokes violations, a scripted test peer, a recorder. Hosts use
/// [`ParentConnection`] or [`WorkerConnection`].
///
/// ```
/// use quirl_lua_protocol::connection::FrameInbox;
///
/// let mut inbox = FrameInbox::new();
/// inbox.feed(&[0, 0, 0, 2, b'{', b'}', 0, 0])?;
/// assert_eq!(inbox.next_payload()?.as_deref(), Some(&b"{}"[..]));
/// assert_eq!(inbox.next_payload()?, None); // half a header is kept
/// assert!(!inbox.is_quiet());
/// assert_eq!(inbox.finish().unwrap_err().kind(), quirl_lua_protocol::ErrorKind::TruncatedHeader);
/// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
/// ```
#[derive(Debug, Default)]
pub struct FrameInbox {
    decoder: FrameDecoder,
    /// Input fed by the caller; `pending[read..]` has not reached the decoder.
    pending: Vec<u8>,
    read: usize,
    /// `finish` was called: no further input.
    ended: bool,
}

impl FrameInbox {
    /// An empty inbox with the v1 frame limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append bytes received from the peer. `invalid_use` after
    /// [`finish`](Self::finish).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.ended {
            return Err(ProtocolError::invalid_use(
                "bytes fed after the end of the stream",
            ));
        }
        self.push(bytes);
        Ok(())
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.read == self.pending.len() {
            self.pending.clear();
            self.read = 0;
        } else if self.read >= COMPACT_AFTER_BYTES {
            self.pending.drain(..self.read);
            self.read = 0;
        }
        self.pending.extend_from_slice(bytes);
    }

    /// The next complete payload (length prefix removed), if the fed bytes
    /// hold one. Framing errors (`empty_frame`, `oversized_frame`) are
    /// sticky.
    pub fn next_payload(&mut self) -> Result<Option<Vec<u8>>, ProtocolError> {
        while self.read < self.pending.len() {
            match self.decoder.feed(&self.pending[self.read..])? {
                Feed::NeedMore => self.read = self.pending.len(),
                Feed::Frame { payload, consumed } => {
                    self.read += consumed;
                    return Ok(Some(payload));
                }
            }
        }
        self.pending.clear();
        self.read = 0;
        Ok(None)
    }

    /// Whether no byte was received since the last complete frame.
    pub fn is_quiet(&self) -> bool {
        self.read == self.pending.len() && self.decoder.is_at_boundary()
    }

    /// Whether fed bytes were not looked at yet (call
    /// [`next_payload`](Self::next_payload) until it returns `None`).
    pub fn has_unread(&self) -> bool {
        self.read < self.pending.len()
    }

    /// Whether [`finish`](Self::finish) was called.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The stream ended: `Ok` at a frame boundary, else
    /// `truncated_header`/`truncated_frame`. Call it once
    /// [`next_payload`](Self::next_payload) returned `None`; with bytes not
    /// looked at yet it is `invalid_use` and changes nothing.
    pub fn finish(&mut self) -> Result<(), ProtocolError> {
        if self.has_unread() {
            return Err(ProtocolError::invalid_use(
                "fed bytes were not read yet; take every payload before finishing",
            ));
        }
        self.ended = true;
        self.decoder.finish()
    }
}

/// Framed bytes waiting to be written, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    bytes: Vec<u8>,
    /// `bytes[..written]` has been reported written.
    written: usize,
}

impl Outbox {
    pub(crate) fn push(&mut self, framed: Vec<u8>) {
        if self.written == self.bytes.len() {
            // Nothing pending: keep the encoder's buffer, no copy.
            self.bytes = framed;
            self.written = 0;
        } else {
            self.bytes.extend_from_slice(&framed);
        }
    }

    pub(crate) fn pending(&self) -> &[u8] {
        &self.bytes[self.written..]
    }

    pub(crate) fn consume(&mut self, count: usize) {
        self.written = self.written.saturating_add(count).min(self.bytes.len());
        if self.written == self.bytes.len() {
            self.bytes.clear();
            self.written = 0;
        }
    }

    pub(crate) fn take(&mut self) -> Vec<u8> {
        let rest = if self.written == 0 {
            std::mem::take(&mut self.bytes)
        } else {
            self.bytes[self.written..].to_vec()
        };
        self.bytes.clear();
        self.written = 0;
        rest
    }
}

/// The fixed state of an ended input, for the send paths.
pub(crate) fn ended_error(peer: &str) -> ProtocolError {
    ProtocolError::invalid_use(format!(
        "the {peer}'s stream has ended; the session is over"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_hands_out_bytes_in_order_across_partial_writes() {
        let mut outbox = Outbox::default();
        outbox.push(vec![1, 2, 3]);
        outbox.consume(2);
        outbox.push(vec![4, 5]);
        assert_eq!(outbox.pending(), &[3, 4, 5]);
        assert_eq!(outbox.take(), vec![3, 4, 5]);
        assert!(outbox.pending().is_empty());
        outbox.push(vec![6]);
        outbox.consume(usize::MAX);
        assert!(outbox.pending().is_empty());
    }

    #[test]
    fn the_inbox_keeps_bytes_after_a_frame_and_compacts_its_front() {
        let mut inbox = FrameInbox::default();
        let frame = [0, 0, 0, 2, b'{', b'}'];
        let mut stream = Vec::new();
        for _ in 0..(COMPACT_AFTER_BYTES / frame.len() + 2) {
            stream.extend_from_slice(&frame);
        }
        inbox.push(&stream);
        let mut frames = 0;
        while frames < COMPACT_AFTER_BYTES / frame.len() + 1 {
            assert_eq!(inbox.next_payload().unwrap().unwrap(), b"{}");
            frames += 1;
        }
        // Feeding now compacts the consumed front and keeps the last frame.
        inbox.push(&frame[..1]);
        assert!(inbox.pending.len() < stream.len());
        assert_eq!(inbox.next_payload().unwrap().unwrap(), b"{}");
        assert!(!inbox.is_quiet());
        assert!(inbox.next_payload().unwrap().is_none());
        inbox.push(&frame[1..]);
        assert_eq!(inbox.next_payload().unwrap().unwrap(), b"{}");
        assert!(inbox.is_quiet());
    }
}
