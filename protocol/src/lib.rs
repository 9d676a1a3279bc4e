//! `quirl.lua-worker@1`: the protocol between a host and a sandboxed Lua
//! worker process, byte-compatible with the Quirl shell 0.1.
//!
//! This crate holds the wire records, a strict frame codec and (per role)
//! sans-IO session state machines. It performs no I/O of its own except in
//! the small blocking adapters ([`read_frame`], [`write_frame`]), and it
//! depends on no Lua, process or async runtime.
//!
//! ```
//! use quirl_lua_protocol::{
//!     decode_parent_frame, encode_worker_frame, Operation, ParentFrame, Response, WorkerFrame,
//! };
//!
//! // Quirl's own request fixture, decoded strictly …
//! let bytes = br#"{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}"#;
//! let ParentFrame::Request { request } = decode_parent_frame(bytes)? else {
//!     unreachable!("the fixture is a request");
//! };
//! assert_eq!(request.id, 7);
//! assert!(matches!(request.operation, Operation::Eval { ref source } if source == "return 42"));
//!
//! // … and the answer, encoded canonically: byte for byte what Quirl sends.
//! let response = WorkerFrame::Response { response: Response::success(7, 42.into()) };
//! assert_eq!(
//!     encode_worker_frame(&response)?,
//!     br#"{"kind":"response","response":{"version":1,"id":7,"ok":true,"result":42}}"#
//! );
//! # Ok::<(), quirl_lua_protocol::ProtocolError>(())
//! ```
//!
//! Modules: [`limits`] (every bound), [`records`] (wire types),
//! [`codec`] (payload encode/decode per direction), [`frame`] (length
//! prefix, push decoder, blocking adapters), [`session`] (the state
//! machines of both roles). Errors carry a stable
//! [`ErrorKind`] that maps to a v1 [`ErrorCode`].

pub mod codec;
mod error;
pub mod frame;
mod json;
pub mod limits;
pub mod records;
pub mod schema;
pub mod session;
pub mod value;

pub use codec::{
    WireFrame, decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
    frame_payload,
};
pub use error::{ErrorKind, ProtocolError};
pub use frame::{Feed, FrameDecoder, read_frame, read_payload, write_frame};
pub use limits::{
    FRAME_BYTES_MAX, HOST_CALLS_PER_REQUEST_MAX, LUA_WORKER_PROTOCOL_DESCRIPTOR, PROTOCOL_VERSION,
    WORKER_ARGUMENT,
};
pub use records::*;
pub use session::{ParentEvent, ParentSession, SessionState, WorkerSession};
