//! Lua 5.4 with quirl-lua-worker's meter, linked to `mlua` (README.md).
//!
//! Linking this crate gives every `mlua` state of the process the metered
//! interpreter (`mlua-sys`'s `external` feature: this crate's build script
//! compiles and links the patched Lua). A state behaves exactly as stock
//! Lua 5.4.9 until its host configures it ([`lua_meter_configure`]) and
//! opens a budget window ([`lua_meter_begin`]); see `c/lmeter.h` for the
//! mechanism and the README for every hunk of the patch.
//!
//! The functions below are the meter's C API (`c/lmeterapi.h`). None of
//! them raises a Lua error or calls back into Lua; each takes the
//! `lua_State` of a live state (any thread of it).

use std::os::raw::{c_int, c_uchar, c_uint};
use std::sync::atomic::{AtomicBool, Ordering};

pub use mlua_sys::lua_State;

/// The state is running: nothing stopped it.
pub const LUAQ_RUNNING: c_int = 0;
/// The instruction budget of the window was spent.
pub const LUAQ_INSTRUCTIONS: c_int = 1;
/// The window's wall-clock deadline passed.
pub const LUAQ_WALLTIME: c_int = 2;
/// An allocation was refused by the memory limit after an emergency
/// collection.
pub const LUAQ_MEMORY: c_int = 3;
/// The host's cancellation flag was set.
pub const LUAQ_CANCELLED: c_int = 4;
/// The host recorded a stop of its own ([`lua_meter_stop`]).
pub const LUAQ_EXTERNAL: c_int = 5;
/// The guest called `os.exit` (grant `lua.os`); recorded by the host, and
/// the one stop it clears, between requests ([`lua_meter_clearexit`]).
pub const LUAQ_EXIT: c_int = 6;

/// The Lua release this crate builds (checked by its build script).
pub const LUA_RELEASE: &str = "Lua 5.4.9";

/// Path of the stock interpreter built by the `stock-baseline` feature:
/// the same release from the same verified sources, none of our patch,
/// `-O3 -DLUA_USE_LINUX -DLUA_COMPAT_5_3`. `STOCK_LUA FILE` runs FILE as a
/// chunk and prints what it returns, tab-separated (`stock/stock_lua.c`).
#[cfg(feature = "stock-baseline")]
pub const STOCK_LUA: &str = env!("QUIRL_STOCK_LUA");

/// What [`lua_meter_status`] reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterStatus {
    /// One of the `LUAQ_*` reasons; the first stop is kept.
    pub stop: c_int,
    /// Whether a window is open.
    pub active: c_int,
    /// Units charged in the window (at the stop, if any).
    pub used: i64,
    /// The window's instruction limit.
    pub limit: i64,
    /// Nanoseconds since the window opened (until the stop, if any).
    pub elapsed_ns: i64,
    /// Bytes the state holds.
    pub memory_in_use: i64,
    /// The memory limit in bytes (0: none).
    pub memory_limit: i64,
    /// Bytes of the allocation refused by a memory stop.
    pub requested: i64,
    /// Bytes the state held when that allocation was refused.
    pub memory_at_refusal: i64,
}

/// Set by [`declare_system_allocator`].
static SYSTEM_ALLOCATOR: AtomicBool = AtomicBool::new(false);

/// Declare that this process's Rust global allocator is the C library's
/// (`std::alloc::System`, Rust's default), so that a host may let its
/// states allocate with `realloc`/`free` directly ([`lua_meter_libcalloc`])
/// instead of through `mlua`'s `lua_Alloc`, which adds its own bookkeeping
/// and Rust's allocator shim to every block (BENCHMARKS.md, "The
/// allocator"). A worker binary calls it first thing in `main`.
///
/// # Safety
///
/// The process must declare no `#[global_allocator]` other than
/// `std::alloc::System`: `mlua`'s `lua_Alloc` allocates a state's first
/// blocks through Rust's global allocator, and after
/// [`lua_meter_libcalloc`] the state resizes and frees them with the C
/// library's `realloc`/`free`, which is sound only if they are C library
/// blocks.
pub unsafe fn declare_system_allocator() {
    SYSTEM_ALLOCATOR.store(true, Ordering::Release);
}

/// Whether [`declare_system_allocator`] was called in this process.
pub fn system_allocator_declared() -> bool {
    SYSTEM_ALLOCATOR.load(Ordering::Acquire)
}

unsafe extern "C" {
    /// From now on the state allocates, resizes and frees its blocks with
    /// the C library's `realloc`/`free` (as stock Lua's `l_alloc` does),
    /// not with its `lua_Alloc`; the state's own block and lauxlib's buffer
    /// boxes keep using the `lua_Alloc`. Call it only where
    /// [`system_allocator_declared`] holds and the state's `lua_Alloc`
    /// takes its blocks from Rust's global allocator (`mlua`'s does).
    pub fn lua_meter_libcalloc(state: *mut lua_State);
    /// Set the memory limit (bytes, 0 for none), the host's cancellation
    /// flag (read whenever the clock is; may be null) and the sandbox
    /// behaviour (non-zero: `setmetatable` never marks an object for
    /// finalization, `collectgarbage` clamps the collector's tuning, and
    /// objects print as numbers, never addresses).
    pub fn lua_meter_configure(
        state: *mut lua_State,
        memory_limit: usize,
        cancel: *const c_uchar,
        sandbox: c_int,
    );
    /// Open a budget window: `limit` units, a deadline `wall_ns` from now.
    pub fn lua_meter_begin(state: *mut lua_State, limit: i64, wall_ns: i64);
    /// Close the window: nothing trips until the next one (but memory).
    pub fn lua_meter_end(state: *mut lua_State);
    /// Record a stop of the host's; returns the stop kept (the first).
    pub fn lua_meter_stop(state: *mut lua_State, reason: c_int) -> c_int;
    /// Clear a [`LUAQ_EXIT`] stop (any other stop stays) and open the
    /// next slice.
    pub fn lua_meter_clearexit(state: *mut lua_State);
    /// Charge `units`; returns the stop (`LUAQ_RUNNING` while running).
    pub fn lua_meter_charge(state: *mut lua_State, units: i64) -> c_int;
    /// Check the clock and the cancellation flag now; returns the stop.
    pub fn lua_meter_check(state: *mut lua_State) -> c_int;
    /// Fill `out` with the meter's state.
    pub fn lua_meter_status(state: *mut lua_State, out: *mut MeterStatus);
    /// Nanoseconds left before the window's deadline (0 without a window).
    pub fn lua_meter_remaining_ns(state: *mut lua_State) -> i64;
    /// Whether the state was configured as a sandbox.
    pub fn lua_meter_sandboxed(state: *mut lua_State) -> c_int;
    /// The next deterministic pivot seed of `table.sort` (exposed for tests
    /// of determinism).
    pub fn lua_meter_pivot(state: *mut lua_State) -> c_uint;
    /// The collector's work count (slots traversed, objects swept): a
    /// collection the program asks for is charged by its difference.
    pub fn lua_meter_gcwork(state: *mut lua_State) -> i64;
    /// The value at `idx` is one of the host's error objects (a userdata):
    /// from now on every userdata with its metatable counts a fixed number
    /// of bytes (`LUAQ_HOST_ERROR_BYTES`) against the memory limit while it
    /// lives, for what the host keeps of it outside Lua's count.
    pub fn lua_meter_hosterrors(state: *mut lua_State, idx: c_int);
}

unsafe extern "C-unwind" {
    /// Throw the state's stop from inside a C function it called (after a
    /// stop was recorded): no message handler runs, as for every stop.
    /// Never returns; it unwinds the way every Lua error does (`longjmp`),
    /// so the caller's frame must hold nothing to drop.
    pub fn lua_meter_raise(state: *mut lua_State) -> !;
}

#[cfg(test)]
mod tests {
    /// The status record has the layout of `lua_MeterStatus` (two ints,
    /// seven 64-bit integers).
    #[test]
    fn status_layout_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<super::MeterStatus>(), 8 + 7 * 8);
    }
}
