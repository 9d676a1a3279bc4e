//! Helpers of the CLI's lifecycle tests, shared with the supervisor's
//! (`quirl_lua_testkit::scratch`).

#![allow(unused_imports)]

pub use quirl_lua_testkit::scratch::{Scratch, eventually, plugin_source};
