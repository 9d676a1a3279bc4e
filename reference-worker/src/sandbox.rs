//! The restricted Lua 5.4 environment.
//!
//! [`build`] creates a VM with only `base`, `string`, `table`, `math`,
//! `utf8` and `coroutine`, runs the trusted prelude (`sandbox.lua`,
//! compiled to bytecode by `build.rs`; SPEC §15.3), prunes
//! the globals to [`GLOBALS`], protects the shared string metatable and
//! installs the count hook for every thread. It does not set the memory
//! limit or the allocator gate (the VM owner does that once the SDK is
//! installed, see `vm/mod.rs`), and it knows nothing about the protocol.
//!
//! Removed: `load`, `loadstring`, `loadfile`, `dofile`, `require`, `print`,
//! `warn`, `io`, `os`, `package`, `debug`, `string.dump`, the
//! `collectgarbage` options that stop the collector or change its mode or
//! tuning, and `__gc` finalizers from guest metatables. Lua patterns run in
//! the budgeted engine of `pattern`.
//!
//! Every Lua wrapper the prelude leaves in a library table is put behind a
//! library call (`library_call.rs`), so errors read as Lua's own.

use crate::library_call;
use crate::meter::Meter;
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, LuaOptions, LuaString, MultiValue, StdLib, Value};
use std::sync::Arc;

/// Every global a guest can reach, with the SDK table `quirl`.
pub const GLOBALS: &[&str] = &[
    "_G",
    "_VERSION",
    "assert",
    "collectgarbage",
    "coroutine",
    "error",
    "getmetatable",
    "ipairs",
    "math",
    "next",
    "pairs",
    "pcall",
    "quirl",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "select",
    "setmetatable",
    "string",
    "table",
    "tonumber",
    "tostring",
    "type",
    "utf8",
    "xpcall",
];

/// The trusted prelude `sandbox.lua`, compiled to Lua bytecode by
/// `build.rs` (with its debug information: positions read `sandbox:N:`).
/// Only [`build`] loads binary chunks, before any guest code exists; every
/// guest chunk is loaded as text only (SPEC §15.1, §15.3).
const PRELUDE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandbox.luac"));

/// Native loops of more than this many steps are charged.
const BIG_COUNT: u64 = 64;

/// A freshly built sandbox.
pub struct Sandbox {
    /// The VM.
    pub lua: Lua,
}

/// The steps of [`build`], in order, as [`build_observed`] reports them
/// (the cold-start bench times each one: BENCHMARKS.md, "Cold start
/// breakdown").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildStep {
    /// `lua_newstate` and the five standard libraries opened.
    LuaState,
    /// The shared string metatable protected.
    StringMetatable,
    /// The Rust helpers the prelude receives created, and the internal
    /// layout `vm_costs.rs` relies on checked.
    Helpers,
    /// The budgeted pattern functions installed (their Lua glue loaded and
    /// run).
    Patterns,
    /// The prelude loaded (not yet run).
    PreludeLoad,
    /// The prelude run: the library wrappers in place.
    PreludeRun,
    /// Every wrapper put behind a library call.
    LibraryCalls,
    /// The globals pruned to [`GLOBALS`].
    Globals,
}

/// Build the restricted VM. No guest code has run when this returns.
pub fn build(meter: &Arc<Meter>) -> mlua::Result<Sandbox> {
    build_observed(meter, &mut |_| {})
}

/// [`build`], calling `observe` after each [`BuildStep`] (for timing; it
/// gets no access to the VM).
pub fn build_observed(
    meter: &Arc<Meter>,
    observe: &mut dyn FnMut(BuildStep),
) -> mlua::Result<Sandbox> {
    let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
    let lua = Lua::new_with(libs, LuaOptions::new())?;
    lua.remove_warning_function();
    observe(BuildStep::LuaState);

    // The string metatable is shared by every string; `__metatable` makes
    // getmetatable("") return `false` instead of the real table.
    let strings = lua
        .type_metatable::<LuaString>()
        .ok_or_else(|| mlua::Error::runtime("the string library set no string metatable"))?;
    strings.raw_set("__metatable", false)?;
    observe(BuildStep::StringMetatable);

    // SAFETY: `guard_stop` follows the lua_CFunction contract (see there).
    let guard = unsafe { lua.create_c_function(guard_stop)? };
    let charge = {
        let meter = Arc::clone(meter);
        lua.create_function(move |_, units: i64| meter.charge(u64::try_from(units).unwrap_or(0)))?
    };
    let reserve_rep = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, (s, n, sep): (Value, Value, Value)| {
            reserve_rep(lua, &meter, s, n, sep)
        })?
    };
    let plain_find = {
        let meter = Arc::clone(meter);
        lua.create_function(move |_, (s, p, init): (LuaString, LuaString, i64)| {
            plain_find(&meter, &s.as_bytes(), &p.as_bytes(), init)
        })?
    };
    check_internal_layout(&lua)?;
    if !crate::hook::check_thread_layout(&lua)? {
        return Err(mlua::Error::runtime(
            "the linked Lua's thread layout is not the Lua 5.4 layout the budget relies on",
        ));
    }
    // Charges a coroutine the instructions it ran since its hook last fired
    // (SPEC §15.7).
    let settle = {
        let meter = Arc::clone(meter);
        lua.create_function(move |_, co: mlua::Thread| {
            // SAFETY: `co` is a live thread of this VM (the argument keeps it
            // alive), and the thread layout was checked just above.
            let units = unsafe { crate::hook::settle_thread(co.state()) };
            meter.charge(units)
        })?
    };
    let table_capacity = lua.create_function(|_, table: mlua::Table| {
        // SAFETY: `table` is a live table held by this call's arguments.
        let (array, hash) = unsafe { crate::vm_costs::table_capacity(table.to_pointer()) };
        Ok((
            i64::try_from(array).unwrap_or(i64::MAX),
            i64::try_from(hash).unwrap_or(i64::MAX),
        ))
    })?;
    observe(BuildStep::Helpers);
    // Budgeted patterns (SPEC §15.4), installed while the original string
    // library is still in place.
    crate::pattern::install(&lua, meter)?;
    observe(BuildStep::Patterns);
    let rewriter = library_call::rewriter(&lua)?;
    let as_library = {
        let rewriter = rewriter.clone();
        lua.create_function(move |lua, wrapper: Function| {
            library_call::library_function(lua, wrapper, &rewriter)
        })?
    };
    // Level 0 is this helper; the library call is the first C function above.
    let caller_where = lua.create_function(|lua, ()| Ok(library_call::caller_position(lua, 1)))?;
    let native_next =
        lua.create_function(|lua, charger: Function| crate::traversal::charged_next(lua, charger))?;
    let prelude = lua
        .load(PRELUDE)
        .set_name(format!("={}", library_call::SANDBOX_ID))
        .set_mode(ChunkMode::Binary)
        .into_function()?;
    observe(BuildStep::PreludeLoad);
    prelude.call::<()>((
        guard,
        charge,
        reserve_rep,
        plain_find,
        settle,
        as_library,
        caller_where,
        table_capacity,
        native_next,
    ))?;
    observe(BuildStep::PreludeRun);
    library_call::install(&lua, &rewriter)?;
    observe(BuildStep::LibraryCalls);

    let globals = lua.globals();
    let mut remove = Vec::new();
    for pair in globals.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let keep =
            matches!(&key, Value::String(name) if GLOBALS.contains(&&*name.to_string_lossy()));
        if !keep {
            remove.push(key);
        }
    }
    for key in remove {
        globals.raw_set(key, Value::Nil)?;
    }
    observe(BuildStep::Globals);
    Ok(Sandbox { lua })
}

/// Fail closed unless the `Table` and `TString` header fields read by
/// `vm_costs.rs` are where it expects them in the linked Lua.
fn check_internal_layout(lua: &Lua) -> mlua::Result<()> {
    let long = "a long string: longer than forty bytes, so not interned";
    // SAFETY: `exec_raw` runs the closure in a protected call with the
    // stack guarded; the values pushed stay on the stack (alive) while their
    // pointers are read.
    let ok: bool = unsafe {
        lua.exec_raw((), |state| {
            let mut ok = true;
            for (narray, nhash, hash_slots) in [(0, 0, 1), (100, 5, 8), (3, 1000, 1024)] {
                mlua::ffi::lua_createtable(state, narray, nhash);
                let capacity = crate::vm_costs::table_capacity(mlua::ffi::lua_topointer(state, -1));
                ok &= capacity == (narray as u64, hash_slots);
                mlua::ffi::lua_settop(state, -2);
            }
            // { x = 42 }: one node.
            mlua::ffi::lua_createtable(state, 0, 1);
            mlua::ffi::lua_pushinteger(state, 42);
            mlua::ffi::lua_setfield(state, -2, c"x".as_ptr());
            ok &= crate::vm_costs::check_table_node_layout(mlua::ffi::lua_topointer(state, -1), 42);
            mlua::ffi::lua_settop(state, -2);
            mlua::ffi::lua_pushlstring(state, long.as_ptr().cast(), long.len());
            let contents = mlua::ffi::lua_tolstring(state, -1, std::ptr::null_mut());
            ok &= crate::vm_costs::check_layout(
                mlua::ffi::lua_topointer(state, -1),
                contents.cast(),
                long.len(),
            );
            mlua::ffi::lua_settop(state, 0);
            mlua::ffi::lua_pushboolean(state, i32::from(ok));
        })?
    };
    // The call-frame fields read by the error-path charges: a Lua function
    // of four instructions calls a C probe.
    let caller: Function = lua
        .load("return function(g) return (g()) end")
        .set_name("=layout")
        .eval()?;
    // SAFETY: `layout_probe` follows the lua_CFunction contract (see there).
    let probe = unsafe { lua.create_c_function(layout_probe)? };
    let frames_ok: bool = caller.call(probe)?;
    if ok && frames_ok {
        Ok(())
    } else {
        Err(mlua::Error::runtime(
            "the linked Lua's table, string or call-frame layout is not the Lua 5.4 layout the budget relies on",
        ))
    }
}

/// Pushes whether the call-frame layout matches, seen from a C function that
/// a Lua function of four instructions called.
///
/// # Safety
/// Called by Lua as a C function; it only reads frames and pushes one
/// boolean (every C function has `LUA_MINSTACK` free slots).
unsafe extern "C-unwind" fn layout_probe(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: `state` is the running thread inside this C function, called
    // from the four-instruction Lua function of `check_internal_layout`.
    unsafe {
        let ok = crate::vm_costs::check_call_layout(state.cast(), 4);
        mlua::ffi::lua_pushboolean(state, std::ffi::c_int::from(ok));
    }
    1
}

/// Install the count hook (see `hook.rs`).
pub fn install_hook(lua: &Lua, meter: &Arc<Meter>) -> mlua::Result<()> {
    crate::hook::install(lua, meter)
}

fn coerced_len(lua: &Lua, value: Value) -> mlua::Result<Option<u64>> {
    Ok(match value {
        Value::String(s) => Some(s.as_bytes().len() as u64),
        Value::Integer(_) | Value::Number(_) => {
            lua.coerce_string(value)?.map(|s| s.as_bytes().len() as u64)
        }
        _ => None,
    })
}

/// string.rep's result must fit in the memory headroom; its copies are
/// charged. Returns `true` when the result is empty although the count is
/// positive (then the caller must not run Lua's loop). Arguments the
/// original would reject are left to it.
fn reserve_rep(lua: &Lua, meter: &Meter, s: Value, n: Value, sep: Value) -> mlua::Result<bool> {
    let Some(len) = coerced_len(lua, s)? else {
        return Ok(false);
    };
    let Some(count) = lua.coerce_integer(n)? else {
        return Ok(false);
    };
    let sep_len = match sep {
        Value::Nil => 0,
        other => match coerced_len(lua, other)? {
            Some(len) => len,
            None => return Ok(false),
        },
    };
    if count <= 0 {
        return Ok(false);
    }
    if len == 0 && sep_len == 0 {
        // Lua's str_rep would loop `count` times copying nothing.
        return Ok(true);
    }
    let count = count as u128;
    let total = count * u128::from(len) + (count - 1) * u128::from(sep_len);
    if total > u128::from(meter.memory_headroom()) {
        return Err(meter.trip_limit(crate::meter::LimitTrip::Memory {
            requested: u64::try_from(total).unwrap_or(u64::MAX),
            used: meter.used_memory(),
            limit: meter.memory_limit(),
        }));
    }
    // One unit per copy (str_rep copies the string and the separator once
    // per repetition) plus the bytes.
    let units = (count as u64).saturating_add(total as u64 / crate::meter::BYTES_PER_UNIT);
    if units > BIG_COUNT {
        meter.charge(units)?;
    }
    Ok(false)
}

/// Literal search with the results of `string.find(s, p, init, true)`, in
/// linear time (Lua's own `lmemfind` is quadratic in the worst case).
fn plain_find(meter: &Meter, s: &[u8], p: &[u8], init: i64) -> mlua::Result<MultiValue> {
    let len = s.len() as u64;
    let start = if init > 0 {
        init as u64
    } else if init == 0 || init.unsigned_abs() > len {
        1
    } else {
        len - init.unsigned_abs() + 1
    } - 1;
    if start > len {
        return Ok(MultiValue::from_iter([Value::Nil]));
    }
    let scanned = len - start + p.len() as u64;
    if scanned >= crate::meter::BYTES_PER_UNIT {
        meter.charge(scanned / crate::meter::BYTES_PER_UNIT)?;
    }
    let start = start as usize;
    match memchr::memmem::find(&s[start..], p) {
        Some(offset) => {
            let first = (start + offset) as i64 + 1;
            let last = first + p.len() as i64 - 1;
            Ok(MultiValue::from_iter([
                Value::Integer(first),
                Value::Integer(last),
            ]))
        }
        None => Ok(MultiValue::from_iter([Value::Nil])),
    }
}

/// `guard()` of the sandbox prelude: raises the stop when the request must
/// stop (SPEC §15.8), from C, so that no traceback is built: the prelude
/// calls it in every protected-call wrapper and message handler, and Lua
/// calls a failing message handler again on top of the stack, so after a
/// stop it can run hundreds of times at the bottom of a deep stack.
///
/// # Safety
/// Called by Lua as a C function; it owns no Rust value with a destructor
/// when it raises.
unsafe extern "C-unwind" fn guard_stop(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    if crate::vm_costs::with_active_meter(crate::meter::Meter::must_stop) == Some(true) {
        // SAFETY: the running thread inside this C function; nothing with a
        // destructor is alive here.
        unsafe { crate::hook::raise_stop(state) }
    }
    0
}
