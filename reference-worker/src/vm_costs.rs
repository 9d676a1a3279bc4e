//! Charges for the Lua VM's own data-dependent work that allocates nothing
//! (SPEC §15.6): comparing long strings (`<`, `<=` use `strcoll` per
//! segment; `==` and table lookups with long-string keys use
//! `luaS_eqlngstr`) and converting strings to numbers (`luaO_str2num`, used
//! by string arithmetic, `tonumber` and every library argument that accepts
//! a numeric string), walking the call stack (`lua_getstack`, which
//! `error` with a level and tracebacks use), and rehashing a table
//! (`luaH_finishset`, `luaH_set`, `luaH_setint`: the stores that can add a
//! key).
//!
//! These run inside single VM instructions, where the count hook cannot see
//! them. The build scripts link every binary with
//! `-Wl,--wrap=SYMBOL` for each of [`WRAPPED_SYMBOLS`]: the linker sends Lua's calls to the `__wrap_`
//! functions below, which charge the active VM's [`Meter`] by the bytes
//! involved and call the original through its `__real_` name. A binary
//! that links this crate without the flags fails to link (the `__real_`
//! symbols are undefined), so the charges cannot be left out silently.
//!
//! The charges cannot raise a Lua error here (the table code calls
//! `luaS_eqlngstr` in the middle of a resize), so they are recorded with
//! [`Meter::charge_quietly`]; once the VM has stopped, the wrappers skip
//! the work and return at once (a stopped VM's results are never used), and
//! the next hook firing raises the stop. The stack walk is the exception:
//! it is bounded and still runs, so the stop's own traceback stays whole.

use crate::meter::{BYTES_PER_UNIT, Meter};
use std::cell::Cell;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

/// The symbols every binary linking this crate must wrap (`-Wl,--wrap=`).
pub const WRAPPED_SYMBOLS: &[&str] = &[
    "strcoll",
    "luaS_eqlngstr",
    "luaO_str2num",
    "lua_getstack",
    "luaH_finishset",
    "luaH_set",
    "luaH_setint",
];

/// Bytes of a byte-at-a-time scan (number parsing) charged as one unit.
pub const SCAN_BYTES_PER_UNIT: u64 = 16;

/// Offset of `lnglen` in Lua 5.4's `TString` (after the 8-byte `next`
/// pointer, `tt`, `marked`, `extra`, `shrlen` and the 4-byte `hash`).
const TSTRING_LNGLEN_OFFSET: usize = 16;
/// Offset of `contents` in Lua 5.4's `TString`.
const TSTRING_CONTENTS_OFFSET: usize = 24;

thread_local! {
    static ACTIVE: Cell<*const Meter> = const { Cell::new(std::ptr::null()) };
}

/// Makes a meter the one the wrappers charge on this thread while it lives
/// (the VM runs on the thread that handles its requests).
pub struct ActiveMeter {
    previous: *const Meter,
    _meter: Arc<Meter>,
}

impl ActiveMeter {
    /// Charge `meter` until the returned guard is dropped.
    pub fn enter(meter: &Arc<Meter>) -> Self {
        let meter = Arc::clone(meter);
        let previous = ACTIVE.with(|active| active.replace(Arc::as_ptr(&meter)));
        Self {
            previous,
            _meter: meter,
        }
    }
}

impl Drop for ActiveMeter {
    fn drop(&mut self) {
        ACTIVE.with(|active| active.set(self.previous));
    }
}

/// Charge the active meter; `true` when the VM is stopped (skip the work).
fn charge(units: u64) -> bool {
    ACTIVE.with(|active| {
        // SAFETY: a non-null pointer was set by a live `ActiveMeter`, which
        // holds an `Arc` to the meter until it resets the pointer on drop.
        match unsafe { active.get().as_ref() } {
            Some(meter) => meter.charge_quietly(units),
            None => false,
        }
    })
}

/// Read a long string's length from its `TString` header.
///
/// # Safety
/// `ts` must point at a live Lua 5.4 long string (`shrlen == 0xFF`).
unsafe fn long_len(ts: *const c_void) -> u64 {
    // SAFETY: per the contract, `ts` is a long `TString`, whose `lnglen`
    // field sits at TSTRING_LNGLEN_OFFSET; `check_layout` verified the
    // layout against the linked Lua when the VM was built.
    unsafe {
        ts.cast::<u8>()
            .add(TSTRING_LNGLEN_OFFSET)
            .cast::<usize>()
            .read_unaligned() as u64
    }
}

/// Verify the `TString` layout this module relies on against the linked Lua:
/// `ts` is the object pointer (`lua_topointer`) of a long string of `len`
/// bytes whose contents start at `contents`.
///
/// # Safety
/// `ts` must be `lua_topointer` of a live long string and `contents` its
/// `lua_tolstring`.
pub unsafe fn check_layout(ts: *const c_void, contents: *const u8, len: usize) -> bool {
    if ts.is_null() || contents.is_null() {
        return false;
    }
    let offset = (contents as usize).wrapping_sub(ts as usize);
    // SAFETY: only read after the contents offset confirmed that `ts` is a
    // TString whose header has the expected size.
    offset == TSTRING_CONTENTS_OFFSET && unsafe { long_len(ts) } == len as u64
}

unsafe extern "C" {
    fn __real_lua_getstack(state: *mut c_void, level: c_int, ar: *mut c_void) -> c_int;
    fn __real_luaH_finishset(
        state: *mut c_void,
        table: *mut c_void,
        key: *const c_void,
        slot: *const c_void,
        value: *mut c_void,
    );
    fn __real_luaH_set(
        state: *mut c_void,
        table: *mut c_void,
        key: *const c_void,
        value: *mut c_void,
    );
    fn __real_luaH_setint(state: *mut c_void, table: *mut c_void, key: i64, value: *mut c_void);
    fn __real_strcoll(a: *const c_char, b: *const c_char) -> c_int;
    fn __real_luaS_eqlngstr(a: *const c_void, b: *const c_void) -> c_int;
    fn __real_luaO_str2num(s: *const c_char, o: *mut c_void) -> usize;
}

/// `l_strcmp` (string `<` and `<=`) calls `strcoll` once per NUL-separated
/// segment: one unit per call plus one per 64 bytes of the shorter segment.
///
/// # Safety
/// Called by Lua with two NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_strcoll(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: both are NUL-terminated (Lua strings always are).
    let shorter = unsafe { libc::strlen(a).min(libc::strlen(b)) } as u64;
    if charge(1 + shorter / BYTES_PER_UNIT) {
        // Non-zero: `l_strcmp` returns it without scanning further.
        return -1;
    }
    // SAFETY: forwarding Lua's arguments to the original.
    unsafe { __real_strcoll(a, b) }
}

/// Long-string equality compares the bytes when the objects differ.
///
/// # Safety
/// Called by Lua with two long `TString`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaS_eqlngstr(a: *const c_void, b: *const c_void) -> c_int {
    if a != b {
        // SAFETY: Lua passes two long strings.
        let (la, lb) = unsafe { (long_len(a), long_len(b)) };
        if la == lb && charge(la / BYTES_PER_UNIT) {
            return 0;
        }
    }
    // SAFETY: forwarding Lua's arguments to the original.
    unsafe { __real_luaS_eqlngstr(a, b) }
}

/// String-to-number conversion scans the string byte by byte.
///
/// # Safety
/// Called by Lua with a NUL-terminated string and a `TValue` to fill.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaO_str2num(s: *const c_char, o: *mut c_void) -> usize {
    // SAFETY: `s` is NUL-terminated (Lua strings and lexer buffers are).
    let len = unsafe { libc::strlen(s) } as u64;
    if len >= SCAN_BYTES_PER_UNIT && charge(len / SCAN_BYTES_PER_UNIT) {
        // "Not a number": the caller raises or returns nil, cheaply.
        return 0;
    }
    // SAFETY: forwarding Lua's arguments to the original.
    unsafe { __real_luaO_str2num(s, o) }
}

/// Frames of a stack walk charged as one unit.
pub const FRAMES_PER_UNIT: u64 = 64;
/// More frames than a Lua 5.4 stack can hold (`LUAI_MAXSTACK` is a million
/// slots, and every frame takes at least one): no walk goes further.
const FRAMES_MAX: u64 = 1_000_000;

/// `lua_getstack(L, level)` follows the chain of call frames `level` steps
/// (or to its end): `error(message, level)` through `luaL_where`, and
/// `luaL_traceback`'s probes. At the bottom of a deep stack a guest could
/// repeat a long walk for a few instructions; it is charged one unit per 64
/// levels asked for, at most what the deepest stack holds.
///
/// # Safety
/// Called with Lua's own arguments (a live thread and a `lua_Debug`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_lua_getstack(
    state: *mut c_void,
    level: c_int,
    ar: *mut c_void,
) -> c_int {
    if let Ok(level) = u64::try_from(level)
        && level >= FRAMES_PER_UNIT
    {
        // The walk itself is bounded (FRAMES_MAX), so it runs even when this
        // charge stops the VM: tracebacks of the stop stay whole.
        charge(level.min(FRAMES_MAX) / FRAMES_PER_UNIT);
    }
    // SAFETY: forwarding Lua's arguments to the original.
    unsafe { __real_lua_getstack(state, level, ar) }
}

/// Offsets in Lua 5.4's `Table` (after the 8-byte `next` pointer, `tt` and
/// `marked`): `flags`, `lsizenode`, `alimit`.
const TABLE_FLAGS_OFFSET: usize = 10;
const TABLE_LSIZENODE_OFFSET: usize = 11;
const TABLE_ALIMIT_OFFSET: usize = 12;
/// `BITRAS` of `flags`: set when `alimit` is not the real array size.
const TABLE_BITRAS: u8 = 1 << 7;

/// Offset of the `node` pointer (the hash part) in Lua 5.4's `Table`.
const TABLE_NODE_OFFSET: usize = 24;

/// Slots of a table's old parts that a rehash counts and moves, charged as
/// one unit.
pub const REHASH_SLOTS_PER_UNIT: u64 = 16;

/// Where a table's hash part lives (the `node` pointer of its header).
///
/// # Safety
/// `table` must point at a live Lua 5.4 `Table`.
unsafe fn table_node(table: *const c_void) -> usize {
    // SAFETY: `table` is a live `Table`; the pointer field sits at the
    // offset `check_table_node_layout` verified when the VM was built.
    unsafe {
        table
            .cast::<u8>()
            .add(TABLE_NODE_OFFSET)
            .cast::<usize>()
            .read_unaligned()
    }
}

/// Verify the `node` offset against the linked Lua: `table` is
/// `lua_topointer` of a table whose hash part is one node holding the
/// integer `hashed`.
///
/// # Safety
/// `table` must be `lua_topointer` of a live table of that shape.
pub unsafe fn check_table_node_layout(table: *const c_void, hashed: i64) -> bool {
    /// `LUA_VNUMINT`, the type tag of an integer `TValue`.
    const VNUMINT: u8 = 3;
    if table.is_null() {
        return false;
    }
    // SAFETY: `table` is a live `Table` (caller's contract) whose hash part
    // is one `Node`, which starts with the node's value as a `TValue`
    // (8-byte value, then the tag); the pointer is checked for null first.
    unsafe {
        let node = table_node(table) as *const u8;
        !node.is_null()
            && node.cast::<i64>().read_unaligned() == hashed
            && node.add(8).read() == VNUMINT
    }
}

/// A table's hash part and sizes before a store that may add a key.
struct BeforeStore {
    node: usize,
    capacity: (u64, u64),
}

/// # Safety
/// `table` must point at a live Lua 5.4 `Table`.
unsafe fn before_store(table: *const c_void) -> BeforeStore {
    // SAFETY: per the contract.
    unsafe {
        BeforeStore {
            node: table_node(table),
            capacity: table_capacity(table),
        }
    }
}

/// A new key that finds no free slot makes Lua rehash the table: count every
/// slot of both parts, allocate the new parts (charged by the allocator) and
/// move every entry. Keys added and removed in turn can rehash a large table
/// at the same size again and again, allocating almost nothing; so a store
/// that resized the table is charged for the old slots. A resize changes a
/// size or, at the same sizes, the hash part's address (the new part is
/// allocated while the old one is still in use); the array's address is not
/// looked at, since `realloc` may keep it or not, and the charge must not
/// depend on the heap's layout (a trip happens at the same point every time).
///
/// # Safety
/// `table` must point at the live `Table` `before` was read from.
unsafe fn after_store(table: *const c_void, before: &BeforeStore) {
    // SAFETY: per the contract.
    let after = unsafe { before_store(table) };
    if after.node != before.node || after.capacity != before.capacity {
        let (array, hash) = before.capacity;
        charge(array.saturating_add(hash) / REHASH_SLOTS_PER_UNIT);
    }
}

/// `t[k] = v` from the VM (and the parser's constant tables).
///
/// # Safety
/// Called by Lua with its own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaH_finishset(
    state: *mut c_void,
    table: *mut c_void,
    key: *const c_void,
    slot: *const c_void,
    value: *mut c_void,
) {
    // SAFETY: Lua passes a live table; the original gets its arguments.
    unsafe {
        let before = before_store(table);
        __real_luaH_finishset(state, table, key, slot, value);
        after_store(table, &before);
    }
}

/// `lua_rawset`.
///
/// # Safety
/// Called by Lua with its own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaH_set(
    state: *mut c_void,
    table: *mut c_void,
    key: *const c_void,
    value: *mut c_void,
) {
    // SAFETY: Lua passes a live table; the original gets its arguments.
    unsafe {
        let before = before_store(table);
        __real_luaH_set(state, table, key, value);
        after_store(table, &before);
    }
}

/// `lua_rawseti`.
///
/// # Safety
/// Called by Lua with its own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaH_setint(
    state: *mut c_void,
    table: *mut c_void,
    key: i64,
    value: *mut c_void,
) {
    // SAFETY: Lua passes a live table; the original gets its arguments.
    unsafe {
        let before = before_store(table);
        __real_luaH_setint(state, table, key, value);
        after_store(table, &before);
    }
}

/// Slots of a table's array part and of its hash part, read from the
/// `Table` header (what `next` may scan: Lua 5.4's `luaH_next` walks empty
/// slots one by one).
///
/// # Safety
/// `table` must be null or `lua_topointer` of a table that stays alive
/// while this runs.
pub unsafe fn table_capacity(table: *const c_void) -> (u64, u64) {
    if table.is_null() {
        return (0, 0);
    }
    let base = table.cast::<u8>();
    // SAFETY: `table` points at a live Lua 5.4 `Table` (the caller holds a
    // reference to it); the fields read are plain bytes of its header, at
    // the offsets `check_table_layout` verified when the VM was built.
    let (flags, lsizenode, alimit) = unsafe {
        (
            base.add(TABLE_FLAGS_OFFSET).read(),
            base.add(TABLE_LSIZENODE_OFFSET).read(),
            base.add(TABLE_ALIMIT_OFFSET).cast::<u32>().read_unaligned(),
        )
    };
    // luaH_realasize: `alimit` is the size unless BITRAS says it is only a
    // hint, then the size is the next power of two.
    let array = if flags & TABLE_BITRAS == 0 || alimit.is_power_of_two() {
        u64::from(alimit)
    } else {
        u64::from(alimit).next_power_of_two()
    };
    let hash = 1u64.checked_shl(u32::from(lsizenode)).unwrap_or(u64::MAX);
    (array, hash)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::WRAPPED_SYMBOLS;

    /// Every package that links the worker passes the same `--wrap` list in
    /// its build script; a symbol missing from one fails that link, and one
    /// missing from all would leave its charge out silently.
    #[test]
    fn every_build_script_wraps_every_symbol() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for package in [
            "reference-worker",
            "reference-parent",
            "testkit",
            "bench",
            "fuzz",
        ] {
            let script = std::fs::read_to_string(root.join(package).join("build.rs")).unwrap();
            for symbol in WRAPPED_SYMBOLS {
                assert!(
                    script.contains(&format!("\"{symbol}\"")),
                    "{package}/build.rs does not wrap {symbol}"
                );
            }
        }
    }
}
