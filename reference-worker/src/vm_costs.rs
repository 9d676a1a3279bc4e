//! Charges for the Lua VM's own data-dependent work that allocates nothing
//! (SPEC §15.6): comparing long strings (`<`, `<=` use `strcoll` per
//! segment; `==` and table lookups with long-string keys use
//! `luaS_eqlngstr`) and converting strings to numbers (`luaO_str2num`, used
//! by string arithmetic, `tonumber` and every library argument that accepts
//! a numeric string), walking the call stack (`lua_getstack`, which
//! `error` with a level and tracebacks use), and rehashing a table
//! (`luaH_finishset`, `lua_rawset`, `lua_rawseti`, `lua_rawsetp`: the
//! stores that can add a key), looking up metamethods (`luaT_gettm`: `__index` and
//! `__newindex` chains of tables), copying `...` (`luaT_getvarargs`), and
//! the code scans and library searches behind error messages
//! (`luaG_typeerror` and kin, `lua_getinfo`).
//!
//! These run inside single VM instructions, where the count hook cannot see
//! them. The build scripts link every binary with
//! `-Wl,--wrap=SYMBOL` for each symbol of [`WRAPPED_SYMBOLS`]: the linker sends Lua's calls to the `__wrap_`
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

/// The symbols every binary linking this crate must wrap (`-Wl,--wrap=`),
/// comma-separated. The list lives in this crate's `build.rs`, which links
/// this crate's own targets with it and hands it to the build scripts of
/// every package that links the crate (`links = "quirl_lua_vm_costs"`).
///
/// The linker redirects *every* call to a wrapped symbol, also the calls
/// from the C file that defines it; and the C compiler may assume that a
/// function of the same file leaves the registers it does not use intact
/// (GCC's `-fipa-ra`), which a wrapper in Rust does not. So a symbol is
/// wrapped only when its own file never calls it, or calls it only where
/// nothing is live afterwards (a tail call, or a function that never
/// returns: `luaG_typeerror` from `luaG_concaterror`). `luaH_getint` failed
/// this rule (`luaH_getn` calls it in a loop) and crashed the release
/// build, which is why hash chains are not charged (SPEC §15.6, "Known
/// limit") and why raw stores are wrapped at the API (`lua_rawset`) rather
/// than in the table code (`luaH_set`, which `luaH_resize` calls in a loop).
pub const WRAPPED_SYMBOLS: &str = env!("QUIRL_LUA_WRAPPED_SYMBOLS");

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

/// Run `f` on the active meter of this thread, if a request is running.
pub(crate) fn with_active_meter<R>(f: impl FnOnce(&Meter) -> R) -> Option<R> {
    ACTIVE.with(|active| {
        // SAFETY: a non-null pointer was set by a live `ActiveMeter`, which
        // holds an `Arc` to the meter until it resets the pointer on drop.
        unsafe { active.get().as_ref() }.map(f)
    })
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

unsafe extern "C-unwind" {
    fn __real_luaG_typeerror(state: *mut c_void, o: *const c_void, op: *const c_char) -> !;
    fn __real_luaG_callerror(state: *mut c_void, o: *const c_void) -> !;
    fn __real_luaG_concaterror(state: *mut c_void, a: *const c_void, b: *const c_void) -> !;
    fn __real_luaG_opinterror(
        state: *mut c_void,
        a: *const c_void,
        b: *const c_void,
        msg: *const c_char,
    ) -> !;
    fn __real_luaG_tointerror(state: *mut c_void, a: *const c_void, b: *const c_void) -> !;
    fn __real_lua_getinfo(state: *mut c_void, what: *const c_char, ar: *mut c_void) -> c_int;
}

unsafe extern "C" {
    fn __real_luaT_getvarargs(state: *mut c_void, ci: *mut c_void, to: *mut c_void, wanted: c_int);
    fn __real_luaT_gettm(events: *mut c_void, event: c_int, name: *mut c_void) -> *const c_void;
    fn __real_lua_getstack(state: *mut c_void, level: c_int, ar: *mut c_void) -> c_int;
    fn __real_luaH_finishset(
        state: *mut c_void,
        table: *mut c_void,
        key: *const c_void,
        slot: *const c_void,
        value: *mut c_void,
    );
    fn __real_lua_rawset(state: *mut c_void, index: c_int);
    fn __real_lua_rawseti(state: *mut c_void, index: c_int, key: i64);
    fn __real_lua_rawsetp(state: *mut c_void, index: c_int, key: *const c_void);
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
pub const FRAMES_PER_UNIT: u64 = 8;
/// More frames than a Lua 5.4 stack can hold (`LUAI_MAXSTACK` is a million
/// slots, and every frame takes at least one): no walk goes further.
const FRAMES_MAX: u64 = 1_000_000;

/// `lua_getstack(L, level)` follows the chain of call frames `level` steps
/// (or to its end): `error(message, level)` through `luaL_where`, and
/// `luaL_traceback`'s probes. At the bottom of a deep stack a guest could
/// repeat a long walk for a few instructions; it is charged one unit per 8
/// levels asked for (a step down a deep chain of call frames misses the
/// cache: about 10 ns), at most what the deepest stack holds.
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

/// Instructions of a function's code scanned by an error message, charged
/// as one unit.
pub const CODE_PER_UNIT: u64 = 64;

/// `lua_Debug` as `lua.h` declares it, with the private `i_ci` (the
/// `CallInfo` of the frame) readable; the same size as mlua's mirror.
#[repr(C)]
struct DebugRecord {
    event: c_int,
    name: *const c_char,
    namewhat: *const c_char,
    what: *const c_char,
    source: *const c_char,
    srclen: usize,
    currentline: c_int,
    linedefined: c_int,
    lastlinedefined: c_int,
    nups: u8,
    nparams: u8,
    isvararg: c_char,
    istailcall: c_char,
    ftransfer: u16,
    ntransfer: u16,
    short_src: [c_char; 60],
    i_ci: *mut c_void,
}

const _: () =
    assert!(std::mem::size_of::<DebugRecord>() == std::mem::size_of::<mlua::ffi::lua_Debug>());

impl DebugRecord {
    fn zeroed() -> Self {
        Self {
            event: 0,
            name: std::ptr::null(),
            namewhat: std::ptr::null(),
            what: std::ptr::null(),
            source: std::ptr::null(),
            srclen: 0,
            currentline: 0,
            linedefined: 0,
            lastlinedefined: 0,
            nups: 0,
            nparams: 0,
            isvararg: 0,
            istailcall: 0,
            ftransfer: 0,
            ntransfer: 0,
            short_src: [0; 60],
            i_ci: std::ptr::null_mut(),
        }
    }
}

/// Offsets in Lua 5.4's `CallInfo` (`func`, then `top`, then `previous`),
/// `TValue` (the tag after the 8-byte value), `LClosure` (`p` after the
/// header and `gclist`) and `Proto` (`sizecode` after the header bytes and
/// two `int`s).
const CALLINFO_FUNC_OFFSET: usize = 0;
const CALLINFO_PREVIOUS_OFFSET: usize = 16;
const TVALUE_TAG_OFFSET: usize = 8;
/// The tag of a Lua closure value: `LUA_VLCL` (6) with the collectable bit.
const TAG_LUA_CLOSURE: u8 = 6 | (1 << 6);
const LCLOSURE_PROTO_OFFSET: usize = 24;
const PROTO_SIZECODE_OFFSET: usize = 24;

/// Instructions of the Lua function a `CallInfo` runs (0 for a C function
/// or no frame).
///
/// # Safety
/// `ci` must be null or a live `CallInfo` of the running Lua state.
unsafe fn code_size_of_call(ci: *const u8) -> u64 {
    if ci.is_null() {
        return 0;
    }
    // SAFETY: `ci` is a live CallInfo: its `func` points at the function's
    // stack slot, a TValue; a Lua closure's value is its LClosure, whose
    // `p` is its Proto. The offsets are the ones `check_call_layout`
    // verified when the VM was built.
    unsafe {
        let func = ci
            .add(CALLINFO_FUNC_OFFSET)
            .cast::<*const u8>()
            .read_unaligned();
        if func.is_null() || func.add(TVALUE_TAG_OFFSET).read() != TAG_LUA_CLOSURE {
            return 0;
        }
        let closure = func.cast::<*const u8>().read_unaligned();
        let proto = closure
            .add(LCLOSURE_PROTO_OFFSET)
            .cast::<*const u8>()
            .read_unaligned();
        let size = proto
            .add(PROTO_SIZECODE_OFFSET)
            .cast::<c_int>()
            .read_unaligned();
        u64::try_from(size).unwrap_or(0)
    }
}

/// # Safety
/// `ci` must be null or a live `CallInfo`.
unsafe fn previous_call(ci: *const u8) -> *const u8 {
    if ci.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a live CallInfo's `previous` field (verified offset).
    unsafe {
        ci.add(CALLINFO_PREVIOUS_OFFSET)
            .cast::<*const u8>()
            .read_unaligned()
    }
}

/// The `CallInfo` of stack level `level`, or null.
///
/// # Safety
/// `state` must be the running Lua thread.
unsafe fn call_at(state: *mut c_void, level: c_int) -> *const u8 {
    let mut record = DebugRecord::zeroed();
    // SAFETY: `DebugRecord` has lua_Debug's layout; lua_getstack only fills
    // its private `i_ci`.
    let found = unsafe { mlua::ffi::lua_getstack(state.cast(), level, (&raw mut record).cast()) };
    if found == 0 {
        std::ptr::null()
    } else {
        record.i_ci.cast_const().cast()
    }
}

/// Verify the offsets `code_size_of_call` and `previous_call` read: called
/// from a C function that a Lua function of `expected` instructions called,
/// level 0 (the C function) must be a C frame whose previous frame is level
/// 1, a Lua function of `expected` instructions.
///
/// # Safety
/// `state` must be the running thread inside such a C function.
pub unsafe fn check_call_layout(state: *mut c_void, expected: u64) -> bool {
    // SAFETY: per the contract; frames 0 and 1 exist.
    unsafe {
        let own = call_at(state, 0);
        let caller = call_at(state, 1);
        !own.is_null()
            && !caller.is_null()
            && previous_call(own) == caller
            && code_size_of_call(own) == 0
            && code_size_of_call(caller) == expected
    }
}

/// Lua's messages for a bad operand (`attempt to index a nil value (field
/// 'x')`) name the operand by scanning the running function's code up to
/// the failing instruction (`findsetreg`): in a function of a million
/// instructions, each caught error costs a million steps for a few
/// instructions of the guest. Charged by the function's size.
///
/// # Safety
/// `state` must be the running thread.
unsafe fn charge_error_scan(state: *mut c_void) {
    // SAFETY: per the contract.
    let size = unsafe { code_size_of_call(call_at(state, 0)) };
    if size >= CODE_PER_UNIT {
        charge(size / CODE_PER_UNIT);
    }
}

/// `luaG_typeerror` (and below: the other errors that name an operand).
///
/// # Safety
/// Called by Lua with its own arguments; never returns (raises).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_luaG_typeerror(
    state: *mut c_void,
    o: *const c_void,
    op: *const c_char,
) -> ! {
    // SAFETY: Lua's own arguments, forwarded; no Rust value with a
    // destructor lives in this frame when the original raises.
    unsafe {
        charge_error_scan(state);
        __real_luaG_typeerror(state, o, op)
    }
}

/// # Safety
/// As `__wrap_luaG_typeerror`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_luaG_callerror(state: *mut c_void, o: *const c_void) -> ! {
    // SAFETY: as in `__wrap_luaG_typeerror`.
    unsafe {
        charge_error_scan(state);
        __real_luaG_callerror(state, o)
    }
}

/// # Safety
/// As `__wrap_luaG_typeerror`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_luaG_concaterror(
    state: *mut c_void,
    a: *const c_void,
    b: *const c_void,
) -> ! {
    // SAFETY: as in `__wrap_luaG_typeerror`.
    unsafe {
        charge_error_scan(state);
        __real_luaG_concaterror(state, a, b)
    }
}

/// # Safety
/// As `__wrap_luaG_typeerror`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_luaG_opinterror(
    state: *mut c_void,
    a: *const c_void,
    b: *const c_void,
    msg: *const c_char,
) -> ! {
    // SAFETY: as in `__wrap_luaG_typeerror`.
    unsafe {
        charge_error_scan(state);
        __real_luaG_opinterror(state, a, b, msg)
    }
}

/// # Safety
/// As `__wrap_luaG_typeerror`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_luaG_tointerror(
    state: *mut c_void,
    a: *const c_void,
    b: *const c_void,
) -> ! {
    // SAFETY: as in `__wrap_luaG_typeerror`.
    unsafe {
        charge_error_scan(state);
        __real_luaG_tointerror(state, a, b)
    }
}

/// `lua_getinfo` with `n` names the frame's function from its caller's code
/// (the same scan, over the calling function: `bad argument #1 to 'rep'`,
/// tracebacks); the library's argument errors (when no name is found there)
/// and its tracebacks (for every frame) then search every loaded library
/// table for the function. Both are charged at every name query: the
/// caller's size, and the library tables' slots.
///
/// # Safety
/// Called with Lua's own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __wrap_lua_getinfo(
    state: *mut c_void,
    what: *const c_char,
    ar: *mut c_void,
) -> c_int {
    // SAFETY: `what` is a NUL-terminated option string; `ar` a lua_Debug
    // filled by lua_getstack unless `what` starts with '>' (then the
    // function is on the stack and no frame is involved).
    unsafe {
        let options = std::ffi::CStr::from_ptr(what).to_bytes();
        let names = options.first() != Some(&b'>') && options.contains(&b'n');
        if names {
            let record = ar.cast::<DebugRecord>();
            let caller = previous_call((*record).i_ci.cast_const().cast());
            let size = code_size_of_call(caller);
            if size >= CODE_PER_UNIT {
                charge(size / CODE_PER_UNIT);
            }
        }
        if names {
            // Tracebacks search for every frame, named or not; argument
            // errors when no name was found: charged on every name query.
            charge(loaded_slots(state) / SEARCHED_SLOTS_PER_UNIT);
        }
        __real_lua_getinfo(state, what, ar)
    }
}

/// Slots of every table in the loaded-libraries table (what Lua's search for
/// a function's global name walks).
///
/// # Safety
/// `state` must be the running thread with three free stack slots (every
/// frame has them: `LUA_MINSTACK` for C functions, `EXTRA_STACK` for Lua).
unsafe fn loaded_slots(state: *mut c_void) -> u64 {
    use mlua::ffi;
    let state: *mut ffi::lua_State = state.cast();
    let mut slots = 0u64;
    // SAFETY: the registry and its `_LOADED` table have no metatables, so
    // these reads and the traversal run no guest code; the stack is restored.
    unsafe {
        if ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, c"_LOADED".as_ptr()) != ffi::LUA_TTABLE
        {
            ffi::lua_settop(state, -2);
            return 0;
        }
        let (array, hash) = table_capacity(ffi::lua_topointer(state, -1));
        slots = slots.saturating_add(array).saturating_add(hash);
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, -2) != 0 {
            if ffi::lua_type(state, -1) == ffi::LUA_TTABLE {
                let (array, hash) = table_capacity(ffi::lua_topointer(state, -1));
                slots = slots.saturating_add(array).saturating_add(hash);
            }
            ffi::lua_settop(state, -2);
        }
        ffi::lua_settop(state, -2);
    }
    slots
}

/// Slots of the loaded library tables searched for a function's name,
/// charged as one unit (the search reads, type-checks and compares every
/// entry: about 30 ns each).
pub const SEARCHED_SLOTS_PER_UNIT: u64 = 2;

/// Values of a stack copy charged as one unit.
pub const VALUES_PER_UNIT: u64 = 64;

/// `...` in an expression that takes all of them (`f(...)`, `{...}`,
/// `select("#", ...)`, `return ...`) copies every extra argument of the
/// running function onto the stack inside one instruction: a function called
/// with 200,000 arguments could copy them again and again for a few
/// instructions each. Charged one unit per 64 values, read as the frame's
/// stack top after the copy (the extra arguments plus at most the
/// function's 255 registers).
///
/// # Safety
/// Called by Lua with its own arguments (the running thread, its current
/// call, the destination, the count wanted or -1 for all).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaT_getvarargs(
    state: *mut c_void,
    ci: *mut c_void,
    to: *mut c_void,
    wanted: c_int,
) {
    // SAFETY: forwarding Lua's arguments to the original; with `wanted < 0`
    // it sets the thread's top after the copied values, which `lua_gettop`
    // reads relative to the running function (the call Lua passed).
    unsafe {
        __real_luaT_getvarargs(state, ci, to, wanted);
        if wanted < 0 {
            let top = mlua::ffi::lua_gettop(state.cast());
            if let Ok(values) = u64::try_from(top)
                && values >= VALUES_PER_UNIT
            {
                charge(values / VALUES_PER_UNIT);
            }
        }
    }
}

/// A metamethod looked up in a metatable (`fasttm`, when the metatable's
/// cache does not already say the event is absent): every step of an
/// `__index` or `__newindex` chain of tables, which Lua follows up to 2,000
/// tables inside one instruction. Charged one unit per
/// [`LOOKUPS_PER_UNIT`](crate::meter::LOOKUPS_PER_UNIT) lookups.
///
/// # Safety
/// Called by Lua with its own arguments (a metatable, an event, its name).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_luaT_gettm(
    events: *mut c_void,
    event: c_int,
    name: *mut c_void,
) -> *const c_void {
    ACTIVE.with(|active| {
        // SAFETY: a non-null pointer was set by a live `ActiveMeter` (see
        // `charge`).
        if let Some(meter) = unsafe { active.get().as_ref() } {
            meter.charge_metamethod_lookup();
        }
    });
    // SAFETY: forwarding Lua's arguments to the original.
    unsafe { __real_luaT_gettm(events, event, name) }
}

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

/// The table at stack index `index` of `state`, as `lua_topointer` gives it
/// (null when it is no table).
///
/// # Safety
/// `state` must be a live thread and `index` valid in it.
unsafe fn table_at(state: *mut c_void, index: c_int) -> *const c_void {
    // SAFETY: per the contract.
    unsafe {
        if mlua::ffi::lua_type(state.cast(), index) == mlua::ffi::LUA_TTABLE {
            mlua::ffi::lua_topointer(state.cast(), index)
        } else {
            std::ptr::null()
        }
    }
}

/// The raw stores of the API (`rawset`, and the library and host code that
/// store without metamethods): as `__wrap_luaH_finishset`. Lua's own table
/// code calls the `luaH_*` stores among themselves, so only the API entry
/// points are wrapped here (a wrapper of a function called from its own
/// file would break the register assumptions the C compiler makes there).
///
/// # Safety
/// Called with Lua's own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_lua_rawset(state: *mut c_void, index: c_int) {
    // SAFETY: the table stays on the stack (only the key and value are
    // popped), so its pointer stays valid across the call.
    unsafe {
        let table = table_at(state, index);
        let before = (!table.is_null()).then(|| before_store(table));
        __real_lua_rawset(state, index);
        if let Some(before) = before {
            after_store(table, &before);
        }
    }
}

/// `lua_rawseti`, as [`__wrap_lua_rawset`].
///
/// # Safety
/// Called with Lua's own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_lua_rawseti(state: *mut c_void, index: c_int, key: i64) {
    // SAFETY: as in `__wrap_lua_rawset`.
    unsafe {
        let table = table_at(state, index);
        let before = (!table.is_null()).then(|| before_store(table));
        __real_lua_rawseti(state, index, key);
        if let Some(before) = before {
            after_store(table, &before);
        }
    }
}

/// `lua_rawsetp`, as [`__wrap_lua_rawset`].
///
/// # Safety
/// Called with Lua's own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __wrap_lua_rawsetp(state: *mut c_void, index: c_int, key: *const c_void) {
    // SAFETY: as in `__wrap_lua_rawset`.
    unsafe {
        let table = table_at(state, index);
        let before = (!table.is_null()).then(|| before_store(table));
        __real_lua_rawsetp(state, index, key);
        if let Some(before) = before {
            after_store(table, &before);
        }
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

    /// The build script's list and this file's wrappers are the same set: a
    /// listed symbol without a `__wrap_` function fails every link, and a
    /// wrapper left off the list never runs (its charge silently missing).
    #[test]
    fn every_listed_symbol_has_a_wrapper_and_every_wrapper_is_listed() {
        let whole = include_str!("vm_costs.rs");
        let source = &whole[..whole.find("#[cfg(test)]").unwrap()];
        let listed: std::collections::BTreeSet<&str> = WRAPPED_SYMBOLS.split(',').collect();
        let defined: std::collections::BTreeSet<&str> = source
            .split("fn __wrap_")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .collect();
        assert!(listed.len() >= 16, "{listed:?}");
        assert_eq!(listed, defined);
    }

    /// Every package that links the worker takes the list from the worker's
    /// build script instead of keeping a copy of its own.
    #[test]
    fn every_linking_package_takes_the_list_from_the_worker() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for package in ["reference-parent", "testkit", "bench", "fuzz"] {
            let script = std::fs::read_to_string(root.join(package).join("build.rs")).unwrap();
            assert!(
                script.contains("DEP_QUIRL_LUA_VM_COSTS_SYMBOLS"),
                "{package}/build.rs does not take the worker's list"
            );
            assert!(
                !script.contains("\"strcoll\""),
                "{package}/build.rs keeps its own list"
            );
        }
    }
}
