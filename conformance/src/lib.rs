//! Conformance suite and runner for `quirl.lua-worker@1`.
//!
//! - [`decode`]: the stream decoder behind `quirl-conformance decode`; it
//!   reports, frame by frame, what the reference decoder makes of any input.
//! - [`worker`]: the worker suite — the runner plays a hostile parent
//!   against any worker command (`quirl-conformance worker -- CMD…`).
//! - [`parent`] and [`fake_worker`]: the parent suite — scripted hostile
//!   workers against any parent command (`quirl-conformance parent -- CMD…`).
//! - [`exec`] and [`report`]: running cases in parallel, expected-failure
//!   lists, text and JSON reports. [`proc`]: process containment and /proc.
//! - [`profile`]: what a case binds (every implementation, or the reference
//!   sandbox's choices). [`embedded`]: the case files, fixtures and SPEC
//!   revision compiled into the runner, so that it needs no source tree.
//!
//! The cases are data (`conformance/cases/*.json`, embedded in the binary)
//! wherever a case can be written as data; README.md documents the format
//! and the contracts an implementation under test must meet.

pub mod decode;
pub mod embedded;
pub mod exec;
pub mod fake_worker;
pub mod parent;
pub mod proc;
pub mod profile;
pub mod report;
pub mod spec_text;
pub mod worker;
