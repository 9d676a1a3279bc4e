//! Test doubles and helpers shared by more than one crate of this
//! repository, so that no test, bench or fuzz target includes another
//! crate's files by path. Not a product (`publish = false`); the products
//! never depend on it.
//!
//! - [`bins`]: the paths of workspace binaries for tests of another
//!   package — this crate's test doubles `quirl-lua-fake-worker` (a
//!   scripted hostile worker, `src/bin/fake_worker.rs`) and
//!   `quirl-lua-scripted-worker` (the lifecycle tests' worker,
//!   `src/bin/scripted_worker.rs`), and the products' binaries.
//! - [`environment`]: skips of tests whose machine lacks cgroup v2 or
//!   Landlock, which fail where the run requires them (`.ci/run`).
//! - [`mirror`]: the serde baseline records of the codec benchmark (X1).
//! - [`procfs`] (feature `proc`): `/proc` observations of the supervision
//!   tests, on the conformance runner's `/proc` parser.
//!
//! The fuzz targets as plain functions, each taking arbitrary bytes and
//! panicking on a property violation: `fuzz/fuzz_targets/*.rs` call them
//! under libFuzzer, the stable suites replay every committed corpus and
//! crash file through them and drive them from proptest.
//!
//! - [`generate`]: the structure-aware record generator (valid frames from
//!   bytes).
//! - [`targets`]: the codec targets and their independent oracles (SPEC §4,
//!   §6.8, §10); [`sessions`]: the session machines against a model of the
//!   transition table.
//! - [`lua_programs`] (feature `worker`): the generated-Lua-program
//!   grammar and its budget check (DESIGN §15.6), used by the `lua_programs`
//!   fuzz target, the worker's replay test and the bench's B1 rows.
//! - [`patterns`] (feature `worker`): the pattern engine against Lua's C
//!   matcher (DESIGN §15.4).
//! - [`scratch`]: scratch directories, bounded waits and the plugin of the
//!   supervision tests (the supervisor's and the CLI's).
//! - [`serial`]: one lock for the tests of a binary that must not overlap.
//! - [`stock`] (feature `stock`): stock Lua of the VM's own release, built
//!   from the same sources without the metering patch, as the oracle of
//!   the differential tests and the baseline of the benchmarks.

pub mod bins;
pub mod environment;
pub mod generate;
pub mod mirror;
pub mod scratch;
pub mod serial;
pub mod sessions;
pub mod targets;

#[cfg(feature = "proc")]
pub mod procfs;

#[cfg(feature = "worker")]
pub mod lua_programs;
#[cfg(feature = "worker")]
pub mod patterns;
#[cfg(feature = "stock")]
pub mod stock;

pub use bins::bin_path;
