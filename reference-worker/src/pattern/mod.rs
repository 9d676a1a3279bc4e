//! Lua 5.4 patterns in Rust, charged step by step (SPEC §15.4).
//!
//! The engine reproduces the pattern matcher of Lua 5.4's `lstrlib.c`
//! (reference manual §6.4.1) over byte slices, with the same results and the
//! same error messages, but every step it takes is counted and charged to a
//! [`Budget`], so a pattern that backtracks exponentially ends by the
//! instruction budget instead of running unbounded inside one native call.
//! Recursion is bounded like Lua's (`MAXCCALLS`, [`MAX_DEPTH`]).
//!
//! - `class`: character classes and sets (locale "C");
//! - `matcher`: the backtracking matcher and its capture state;
//! - `ops`: `find`, `match`, `gmatch` and `gsub` semantics (init, anchors,
//!   captures, the empty-match rules);
//! - `replace`: the `%0`–`%9` replacement strings of `gsub`;
//! - `binding`: the thin layer that installs the four functions into a
//!   sandboxed `mlua` state.
//!
//! Everything except `binding` is independent of `mlua`.

mod binding;
mod class;
mod matcher;
mod ops;
mod replace;

pub use binding::install;
pub use ops::{Capture, Found, GmatchCursor, find, gmatch_next, gsub, gsub_scan, lua_match};
pub use replace::Replacement;

/// Lua's `LUA_MAXCAPTURES`: captures per pattern.
pub const MAX_CAPTURES: usize = 32;
/// Lua's `MAXCCALLS` for patterns: nested matcher calls before
/// "pattern too complex".
pub const MAX_DEPTH: u32 = 200;
/// Steps counted locally before they are charged to the [`Budget`] in one
/// call. The trip is deterministic: it happens at the first batch boundary
/// (or the end of the operation) after the budget is exceeded.
pub const STEPS_PER_CHARGE: u64 = 1024;

/// Where the steps of a match are charged.
pub trait Budget {
    /// Why the budget stopped the operation.
    type Stop;
    /// Charge `steps` matcher steps; an error stops the operation.
    fn charge(&mut self, steps: u64) -> Result<(), Self::Stop>;
    /// The largest result `gsub` may build in memory it owns, in bytes.
    fn output_limit(&self) -> usize;
    /// The stop for a `gsub` result that would grow to `requested` bytes,
    /// beyond [`Budget::output_limit`].
    fn output_too_large(&mut self, requested: usize) -> Self::Stop;
}

/// Why a pattern operation did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError<S> {
    /// A Lua error with exactly the message Lua's own implementation raises
    /// (without the position prefix, which the caller adds).
    Lua(String),
    /// The budget stopped the operation.
    Stopped(S),
}

impl<S> PatternError<S> {
    pub(crate) fn lua(message: impl Into<String>) -> Self {
        Self::Lua(message.into())
    }
}

/// A budget that stops after a fixed number of steps (`u64::MAX` for
/// tests and benchmarks of the engine itself).
#[derive(Debug, Clone, Copy)]
pub struct StepLimit {
    /// Steps charged so far.
    pub steps: u64,
    /// Charged steps above this stop the operation.
    pub limit: u64,
}

/// The stop of a [`StepLimit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimitExceeded;

impl Budget for StepLimit {
    type Stop = StepLimitExceeded;

    fn charge(&mut self, steps: u64) -> Result<(), Self::Stop> {
        self.steps = self.steps.saturating_add(steps);
        if self.steps > self.limit {
            Err(StepLimitExceeded)
        } else {
            Ok(())
        }
    }

    fn output_limit(&self) -> usize {
        usize::MAX
    }

    fn output_too_large(&mut self, _requested: usize) -> Self::Stop {
        StepLimitExceeded
    }
}
