//! Fuzz targets of `quirl-lua-protocol` as plain functions.
//!
//! `fuzz_targets/*.rs` are thin libFuzzer wrappers around [`targets`]; the
//! stable test `protocol/tests/fuzz_corpus_replay.rs` includes the same
//! files with `#[path]` and replays every committed corpus and crash file.

pub mod generate;
pub use quirl_lua_testkit::lua_programs;
pub mod patterns;
pub mod sessions;
pub mod targets;
