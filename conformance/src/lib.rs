//! Conformance tools for `quirl.lua-worker@1`.
//!
//! [`decode`] is the stream decoder behind `quirl-conformance decode`: it
//! reads framed bytes and reports, frame by frame, what the reference
//! decoder of the `quirl-lua-protocol` crate makes of them. Other
//! implementations use it to compare their own decoder against ours on any
//! input, the golden fixtures in `fixtures/` included.

pub mod decode;
