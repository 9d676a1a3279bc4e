//! The sandbox's `next` (SPEC §15.6): Lua's own `next` as a C function,
//! charged for the slots it scans.
//!
//! Lua 5.4's `next` walks empty slots one by one, so one call on a large,
//! mostly empty table is a long native scan; the sandbox charges it
//! (`sandbox.lua`, the *charger*). A table of at most 64 slots (array part
//! plus hash part) is scanned in time covered by the call's own
//! instruction, so only larger tables need the charger's bookkeeping. The
//! function built here does exactly what Lua's `luaB_next` does (same
//! argument check, same results: one `nil` at the end of a traversal, same
//! errors, raised from a C function as Lua's are) and, for a larger table,
//! then calls the charger with the table, the key it was given and the key
//! it returns. A traversal of small tables therefore costs what it costs in
//! Lua: no Lua instruction of the sandbox runs.

use crate::vm_costs;
use mlua::{Function, Lua, ffi};
use std::os::raw::c_int;

/// Tables with at most this many slots are scanned uncharged (the `next`
/// call's own instruction covers the scan, as for other native loops of up
/// to 64 steps, SPEC §15.6).
const UNCHARGED_SLOTS: u64 = 64;

/// `next` over `charger`, a Lua function `charger(t, key, next_key)` that
/// charges the scan from `key` to `next_key` (`nil` at the end).
pub fn charged_next(lua: &Lua, charger: Function) -> mlua::Result<Function> {
    // SAFETY: `exec_raw` runs the closure in protected mode with the
    // charger as its one argument; `lua_pushcclosure` pops it as the
    // closure's upvalue and pushes the closure, the one result.
    unsafe {
        lua.exec_raw(charger, |state| {
            ffi::lua_pushcclosure(state, next_call, 1);
        })
    }
}

/// `next(t [, key])`, as `luaB_next`, then the charger for a large table.
///
/// # Safety
/// Called by Lua only, as the C closure built by [`charged_next`] (upvalue 1
/// is the charger).
unsafe extern "C-unwind" fn next_call(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: the arguments are on `state`'s stack; `luaL_checktype` raises
    // Lua's own argument error. After `lua_settop(2)` the stack is
    // [t, key]; `lua_next` pops the copied key and pushes the next pair (or
    // nothing), raising "invalid key to 'next'" as Lua's does. At most six
    // slots are used, within LUA_MINSTACK. The table stays on the stack, so
    // the pointer given to `table_capacity` is alive. This frame owns no
    // Rust value with a destructor, so a `longjmp` from the charger or from
    // `lua_next` skips nothing.
    unsafe {
        ffi::luaL_checktype(state, 1, ffi::LUA_TTABLE);
        ffi::lua_settop(state, 2);
        ffi::lua_pushvalue(state, 2);
        let found = ffi::lua_next(state, 1) != 0;
        if !found {
            ffi::lua_pushnil(state);
        }
        let (array, hash) = vm_costs::table_capacity(ffi::lua_topointer(state, 1));
        if array.saturating_add(hash) > UNCHARGED_SLOTS {
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
            ffi::lua_pushvalue(state, 1);
            ffi::lua_pushvalue(state, 2);
            ffi::lua_pushvalue(state, 3);
            ffi::lua_call(state, 3, 0);
        }
        if found { 2 } else { 1 }
    }
}
