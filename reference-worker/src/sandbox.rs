//! The restricted Lua 5.4 environment.
//!
//! [`build`] creates a VM with only `base`, `string`, `table`, `math`,
//! `utf8` and `coroutine`, removes `string.dump`, protects the shared
//! string metatable and prunes the globals to [`GLOBALS`] (SPEC §15.3). It
//! runs no Lua of its own: the VM is the metered Lua of
//! `quirl-lua-metered-vm`, whose library functions charge their own work
//! and, once the VM owner attaches the meter ([`Meter::attach`]), refuse
//! `__gc` finalizers and the collector options that stop or retune it and
//! print objects as numbers instead of addresses (SPEC §15.3, §15.5,
//! §15.6). It does not configure the budgets (the VM owner does that once
//! the SDK is installed, see `vm/mod.rs`), and it knows nothing about the
//! protocol.
//!
//! Removed: `load`, `loadstring`, `loadfile`, `dofile`, `require`, `print`,
//! `warn`, `io`, `os`, `package`, `debug` and `string.dump`.

use crate::meter::Meter;
use mlua::{Lua, LuaOptions, LuaString, StdLib, Value};
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
    /// The shared string metatable protected and `string.dump` removed.
    StringMetatable,
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
    _meter: &Arc<Meter>,
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
    let string: mlua::Table = lua.globals().raw_get("string")?;
    string.raw_set("dump", Value::Nil)?;
    observe(BuildStep::StringMetatable);

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
