//! Test and benchmark helpers shared by more than one crate of this
//! repository, so that no test, bench or fuzz target includes another
//! crate's files by path. Not a product (`publish = false`); the products
//! never depend on it.
//!
//! - [`bins`]: the path of another package's binary for a test or bench.
//! - [`mirror`]: the serde baseline records of the codec benchmark (X1).
//! - [`lua_programs`] (feature `worker`): the generated-Lua-program
//!   grammar and its budget check (SPEC §15.6), used by the `lua_programs`
//!   fuzz target, the worker's replay test and the bench's B1 rows.

pub mod bins;
pub mod mirror;

pub use bins::bin_path;

#[cfg(feature = "worker")]
pub mod lua_programs;
