//! Library functions that fail as Lua's own do (SPEC §15.11).
//!
//! The sandbox replaces some standard library functions with Lua wrappers
//! (`sandbox.lua`). A Lua function differs from Lua's C library functions in
//! ways a guest can see: a tail call to it replaces the caller's frame, and
//! an error raised inside it carries the wrapper's position
//! (`sandbox:239: bad argument #2 to 'format'`) and the wrapper's view of the
//! call (its own argument numbering, the name of its upvalue).
//!
//! [`install`] therefore puts every such wrapper behind a C closure, the
//! *library call*: a guest calls a C function exactly as it calls Lua's own,
//! so its frame survives a tail call and its call instruction names the
//! function. The C closure calls the wrapper in protected mode (yieldable,
//! with a continuation) and lets everything through unchanged except an error
//! whose message starts with the sandbox chunk's position: an error raised by
//! the sandbox itself or by an original library function it called. That
//! error is rewritten as `luaL_argerror` and `luaL_error` would have written
//! it had the guest called the original directly: the position becomes the
//! guest's calling line (`luaL_where(L, 1)`), and a `bad argument #N to 'x'
//! (…)` message takes the name and numbering Lua derives from the guest's
//! call (a method call does not count `self`; `calling 'x' on bad self`; a
//! call without a name gets the global name from the loaded-libraries table,
//! else `?`). Because the rewritten error is raised from the C closure, after
//! the wrapper's frames have been unwound, tracebacks never show them.

use mlua::{Function, Lua, Table, Value, ffi};
use std::ffi::c_int;

/// The chunk name of the trusted prelude as Lua prints it in positions.
pub const SANDBOX_ID: &str = "sandbox";

/// The library tables whose Lua wrappers [`install`] replaces.
const LIBRARIES: &[&str] = &["string", "table", "math", "utf8", "coroutine"];

/// The C closure behind every library call. Upvalue 1 is the sandbox's Lua
/// wrapper, upvalue 2 the error rewriter ([`rewrite_error`]).
///
/// # Safety
/// Called by Lua only, as a C closure created by [`library_function`] with
/// exactly those two upvalues.
unsafe extern "C-unwind" fn call_library(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: `state` is the running thread Lua passed in. The arguments are
    // on its stack; pushing the wrapper uses the one extra slot every C
    // function is guaranteed (LUA_MINSTACK). `lua_pcallk` with a continuation
    // keeps the call yieldable; when the callee yields, Lua later resumes at
    // `finish_library_call` instead of returning here. This frame owns no
    // Rust value with a destructor, so Lua's longjmp may leave it.
    unsafe {
        let nargs = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        let status = ffi::lua_pcallk(
            state,
            nargs,
            ffi::LUA_MULTRET,
            0,
            0,
            Some(finish_library_call),
        );
        finish_library_call(state, status, 0)
    }
}

/// Continuation of [`call_library`]: return the wrapper's results, or raise
/// its error (rewritten when it is a sandbox-positioned string).
///
/// # Safety
/// Called only by [`call_library`] or by Lua as its continuation, on the same
/// C closure's frame.
unsafe extern "C-unwind" fn finish_library_call(
    state: *mut ffi::lua_State,
    status: c_int,
    _context: ffi::lua_KContext,
) -> c_int {
    // SAFETY: on success the stack holds exactly the wrapper's results; on an
    // error it holds the error value on top. `lua_call` of the rewriter (an
    // mlua function that never yields) uses the slot the error value frees
    // plus one, within LUA_MINSTACK. `lua_error` does not return; this frame
    // owns no value with a destructor.
    unsafe {
        if status == ffi::LUA_OK || status == ffi::LUA_YIELD {
            return ffi::lua_gettop(state);
        }
        if status == ffi::LUA_ERRRUN && ffi::lua_type(state, -1) == ffi::LUA_TSTRING {
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(2));
            ffi::lua_insert(state, -2);
            ffi::lua_call(state, 1, 1);
        }
        ffi::lua_error(state)
    }
}

/// Put `wrapper` behind a library call (a C closure; see the module head).
pub fn library_function(
    lua: &Lua,
    wrapper: Function,
    rewriter: &Function,
) -> mlua::Result<Function> {
    // SAFETY: `exec_raw` runs the closure in protected mode with the two
    // arguments on the stack; `lua_pushcclosure` pops them as the upvalues
    // of `call_library` and pushes the closure, which is the one result.
    unsafe {
        lua.exec_raw((wrapper, rewriter.clone()), |state| {
            ffi::lua_pushcclosure(state, call_library, 2);
        })
    }
}

/// The rewriter (upvalue 2 of every library call), see [`rewrite_error`].
pub fn rewriter(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|lua, error: Value| rewrite_error(lua, error))
}

/// Replace every Lua function in the global table and in [`LIBRARIES`] by a
/// library call. Functions already in C (Lua's own) are left as they are.
///
/// One walk over the tables through the C API: asking mlua for each
/// function's debug record allocated several strings per function and was a
/// fifth of the VM build (BENCHMARKS.md, "Cold start breakdown").
pub fn install(lua: &Lua, rewriter: &Function) -> mlua::Result<()> {
    // SAFETY: `exec_raw` runs the closure in a protected call with the
    // rewriter as its one argument (index 1); a C function has LUA_MINSTACK
    // (20) slots and the walk uses at most six. The global table and each
    // library table stay on the stack (alive) while they are walked, and
    // `wrap_lua_functions` only assigns fields that already exist, which
    // `lua_next` allows during a traversal. A memory error raised by
    // `lua_pushcclosure` is caught by the protected call; no Rust value with
    // a destructor lives in this frame. The stack is emptied at the end, so
    // the call returns no values.
    unsafe {
        lua.exec_raw::<()>(rewriter.clone(), |state| {
            ffi::lua_pushglobaltable(state);
            wrap_lua_functions(state, 2);
            for name in LIBRARIES {
                ffi::lua_pushlstring(state, name.as_ptr().cast(), name.len());
                if ffi::lua_rawget(state, 2) == ffi::LUA_TTABLE {
                    wrap_lua_functions(state, 3);
                }
                ffi::lua_settop(state, 2);
            }
            ffi::lua_settop(state, 0);
        })
    }
}

/// Replace each Lua function among the values of the table at stack index
/// `table` by a library call; the rewriter is at stack index 1.
///
/// # Safety
/// Called inside a protected call (see [`install`]) with a table at
/// `table`, the rewriter at 1, `table` the top of the stack, and at least
/// four free stack slots.
unsafe fn wrap_lua_functions(state: *mut ffi::lua_State, table: c_int) {
    // SAFETY: the caller's contract; the loop keeps the key on top between
    // iterations as `lua_next` requires, and assigns only existing keys.
    unsafe {
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, table) != 0 {
            // key, value
            if ffi::lua_type(state, -1) == ffi::LUA_TFUNCTION
                && ffi::lua_iscfunction(state, -1) == 0
            {
                ffi::lua_pushvalue(state, -2); // key, value, key
                ffi::lua_insert(state, -2); // key, key, value
                ffi::lua_pushvalue(state, 1); // key, key, value, rewriter
                ffi::lua_pushcclosure(state, call_library, 2); // key, key, call
                ffi::lua_rawset(state, table); // key
            } else {
                ffi::lua_settop(state, -2); // key
            }
        }
    }
}

/// `luaL_where(L, 1)` for the library call whose rewriter or helper is
/// running: the position of the line that called it, or nothing when its
/// caller is not a Lua function. `first` is the stack level to start the
/// search for the library call (the first C function at or above it).
pub fn caller_position(lua: &Lua, first: usize) -> String {
    let mut level = first;
    loop {
        match lua.inspect_stack(level, |debug| debug.source().what == "C") {
            Some(true) => break,
            Some(false) => level += 1,
            None => return String::new(),
        }
    }
    position_at(lua, level + 1)
}

fn position_at(lua: &Lua, level: usize) -> String {
    lua.inspect_stack(level, |debug| {
        let line = debug.current_line()?;
        let source = debug.source();
        let short = source.short_src?;
        Some(format!("{short}:{line}: "))
    })
    .flatten()
    .unwrap_or_default()
}

/// Split `message` after a leading `sandbox:<line>: ` position.
fn sandbox_positioned(message: &[u8]) -> Option<&[u8]> {
    let rest = message
        .strip_prefix(SANDBOX_ID.as_bytes())?
        .strip_prefix(b":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    rest[digits..].strip_prefix(b": ")
}

/// The parts of `bad argument #N to 'name' (extra)`.
fn argument_error(message: &[u8]) -> Option<(i64, &[u8])> {
    let rest = message.strip_prefix(b"bad argument #")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let number = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = rest[digits..].strip_prefix(b" to '")?;
    let close = rest.windows(3).position(|w| w == b"' (")?;
    let extra = rest[close + 3..].strip_suffix(b")")?;
    Some((number, extra))
}

/// Lua's `pushglobalfuncname`: the `lib.name` under which `function` is
/// found in the loaded-libraries table (two levels, raw traversal order),
/// without a `_G.` prefix.
fn global_name(lua: &Lua, function: &Function) -> Option<String> {
    let loaded = lua.named_registry_value::<Table>("_LOADED").ok()?;
    let wanted = Value::Function(function.clone());
    for pair in loaded.pairs::<Value, Value>() {
        let Ok((Value::String(library), value)) = pair else {
            continue;
        };
        let library = library.to_string_lossy();
        if value == wanted {
            return Some(library);
        }
        let Value::Table(table) = value else {
            continue;
        };
        for pair in table.pairs::<Value, Value>() {
            if let Ok((Value::String(name), value)) = pair
                && value == wanted
            {
                let name = name.to_string_lossy();
                return Some(if library == "_G" {
                    name
                } else {
                    format!("{library}.{name}")
                });
            }
        }
    }
    None
}

/// Rewrite a sandbox-positioned error as raised by the library call at
/// stack level 1 (see the module head). Anything else is returned as it is.
pub fn rewrite_error(lua: &Lua, error: Value) -> mlua::Result<Value> {
    let Value::String(text) = &error else {
        return Ok(error);
    };
    let bytes = text.as_bytes();
    let Some(rest) = sandbox_positioned(&bytes) else {
        return Ok(error);
    };
    let mut message = position_at(lua, 2).into_bytes();
    match argument_error(rest) {
        Some((number, extra)) => {
            let (name, method, function) = lua
                .inspect_stack(1, |debug| {
                    let names = debug.names();
                    (
                        names.name.map(|n| n.into_owned()),
                        names.name_what == Some("method"),
                        debug.function(),
                    )
                })
                .ok_or_else(|| mlua::Error::runtime("library call frame not found"))?;
            let number = if method { number - 1 } else { number };
            let name = name
                .or_else(|| global_name(lua, &function))
                .unwrap_or_else(|| "?".to_owned());
            if method && number == 0 {
                message.extend_from_slice(format!("calling '{name}' on bad self (").as_bytes());
            } else {
                message
                    .extend_from_slice(format!("bad argument #{number} to '{name}' (").as_bytes());
            }
            message.extend_from_slice(extra);
            message.push(b')');
        }
        None => message.extend_from_slice(rest),
    }
    Ok(Value::String(lua.create_string(message)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_positions_and_argument_errors_are_recognised() {
        assert_eq!(
            sandbox_positioned(b"sandbox:239: bad argument"),
            Some(&b"bad argument"[..])
        );
        assert_eq!(sandbox_positioned(b"sandbox: x"), None);
        assert_eq!(sandbox_positioned(b"eval:1: x"), None);
        assert_eq!(
            argument_error(b"bad argument #2 to 'format' (no value (x))"),
            Some((2, &b"no value (x)"[..]))
        );
        assert_eq!(argument_error(b"bad argument #x to 'f' (y)"), None);
        assert_eq!(
            argument_error(b"wrong number of arguments to 'insert'"),
            None
        );
    }
}
