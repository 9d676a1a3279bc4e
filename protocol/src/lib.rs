//! `quirl.lua-worker@1`: the protocol between a host and a sandboxed Lua
//! worker process, byte-compatible with the Quirl shell 0.1.
//!
//! This crate holds the wire records, a strict frame codec and (per role)
//! sans-IO session state machines and connections. It performs no I/O of
//! its own except in the adapters ([`blocking`], and `tokio_io` behind the
//! `tokio` feature), and it depends on no Lua or process runtime.
//!
//! ```
//! use quirl_lua_protocol::{decode_parent_frame, encode_worker_frame};
//! use quirl_lua_protocol::records::{Operation, ParentFrame, Response, WorkerFrame};
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
//! # Connections
//!
//! A host drives one [`ParentConnection`] per worker, a worker one
//! [`WorkerConnection`]. Both are sans-IO: bytes in
//! ([`feed`](ParentConnection::feed)), typed events out
//! ([`poll_event`](ParentConnection::poll_event)), typed sends into an
//! outgoing buffer the caller drains, and
//! [`end_of_stream`](ParentConnection::end_of_stream) applying SPEC §9.5.
//! The [`blocking`] module runs them over `std::io` streams (with optional
//! read deadlines); the `tokio_io` module (feature `tokio`) over tokio's
//! `AsyncRead`/`AsyncWrite`.
//!
//! # Transport
//!
//! The protocol runs over the worker process's standard streams (SPEC §3):
//!
//! | worker stream | parent side |
//! |---|---|
//! | stdin | the parent writes requests and host responses here |
//! | stderr | the parent reads the worker's frames here (the reference worker writes them through a duplicate of that pipe on descriptor 3, DESIGN §18.2; it is the same pipe) |
//! | stdout | connect it to `/dev/null`; a worker never writes it |
//!
//! Spawn the worker without a terminal and in its own process group, with a
//! cleared environment (SPEC §3.1, DESIGN §17). To end the session cleanly, close
//! the worker's stdin while no request is in flight: the worker exits 0
//! (SPEC §3.3). A worker reads stdin and writes only complete frames to
//! stderr; it exits nonzero on any violation without writing again (§9.6).
//!
//! ```no_run
//! use quirl_lua_protocol::blocking::ParentClient;
//! use quirl_lua_protocol::operations::{Eval, Initialize};
//! use quirl_lua_protocol::records::Policy;
//! use std::process::{Command, Stdio};
//!
//! let mut child = Command::new("quirl-worker")
//!     .stdin(Stdio::piped())
//!     .stdout(Stdio::null())
//!     .stderr(Stdio::piped())
//!     .spawn()?;
//! let (Some(stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
//!     unreachable!("both are piped");
//! };
//! let mut worker = ParentClient::new(stderr, stdin);
//! worker.call(Initialize::new(Policy::quirl_config_profile()))??;
//! let answer: serde_json::Value = worker.call(Eval::new("return 6 * 7"))??;
//! println!("{answer}");
//! drop(worker); // closes stdin: a clean end
//! child.wait()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Features
//!
//! - `schema` (opt-in): the `schema` module, JSON Schema of both frame
//!   directions via `schemars`. Without it (the default) the crate needs no
//!   proc-macro crate besides serde's derive.
//! - `tokio`: the async adapters, module `tokio_io`.
//! - `arbitrary`: `arbitrary::Arbitrary` for every record of [`records`],
//!   generating values within the protocol's bounds (structure-aware
//!   fuzzing of a host's code and of this crate's).
//!
//! # Modules
//!
//! [`limits`] (every bound), [`records`] (wire types, and
//! [`records::StrictDecode`] to build them from a host's own JSON; the
//! root re-exports no record), [`operations`] (each operation as a type
//! that names its result, for typed calls), [`cancellation`] (a host's own
//! flag or predicate as a cancellation),
//! [`codec`] (payload encode/decode per direction), [`frame`] (length
//! prefix, push decoder, one-shot blocking helpers), [`session`] (the state
//! machines of both roles), [`connection`] (sessions with their buffers),
//! [`blocking`] (std adapters). Errors carry a stable
//! [`ErrorKind`] that maps to a v1 [`ErrorCode`](records::ErrorCode);
//! `.with_context(…)` on any error is the [`ErrorContext`] trait,
//! re-exported at the crate root (`use quirl_lua_protocol::ErrorContext;`).

#![forbid(unsafe_code)]
// docs.rs (`[package.metadata.docs.rs]` passes `--cfg docsrs`) labels the
// feature-gated modules with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
pub mod cancellation;
pub mod codec;
pub mod connection;
mod error;
pub mod frame;
mod json;
pub mod limits;
pub mod operations;
pub mod records;
#[cfg(feature = "schema")]
#[cfg_attr(docsrs, doc(cfg(feature = "schema")))]
pub mod schema;
pub mod session;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio_io;
pub mod value;

pub use codec::{
    WireFrame, decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
    frame_payload,
};
pub use connection::{
    FrameInbox, HostCommand, ParentConnection, Responded, WorkerConnection, WorkerEvent,
};
pub use error::{ErrorContext, ErrorKind, ProtocolError};
pub use frame::{Feed, FrameDecoder, read_frame, read_payload, write_frame};
pub use limits::{
    FRAME_BYTES_MAX, HOST_CALLS_PER_REQUEST_MAX, LUA_WORKER_PROTOCOL_DESCRIPTOR, PROTOCOL_VERSION,
    WORKER_ARGUMENT,
};
/// The JSON library of free-form values ([`records::Response::result`],
/// contexts, [`records::OperationResult::Value`]), re-exported so a host
/// uses the same version.
pub use serde_json;
pub use session::{ParentEvent, ParentSession, SessionState, WorkerSession};

/// The examples of `README.md`, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
