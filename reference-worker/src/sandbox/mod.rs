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
//!
//! With the worker capability [`LUA_LOAD_GRANT`] (SPEC §7.1, §15.3 "The
//! `lua.load` capability") [`build_with`] keeps three more globals: Lua's
//! own `load` (the C `luaB_load`: stock arguments, chunk names and
//! messages), `require` and a `package` table of only `loaded`, `preload`
//! and a `searchers` list holding only the preload searcher, so `require`
//! never searches a path and never loads a C module. Binary chunks are
//! refused by the metered VM itself in sandbox mode (its `ldo.c` hunk), at
//! the one place every chunk passes, whatever the mode argument says.

pub mod grants;
pub mod sdk;

pub use grants::LUA_LOAD_GRANT;

use crate::budget::Meter;
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

/// The globals [`LUA_LOAD_GRANT`] adds to [`GLOBALS`].
pub const LUA_LOAD_GLOBALS: &[&str] = &["load", "package", "require"];

/// The members of `package` under [`LUA_LOAD_GRANT`]; `path`, `cpath`,
/// `config`, `loadlib` and `searchpath` are removed.
pub const PACKAGE_MEMBERS: &[&str] = &["loaded", "preload", "searchers"];

/// What a sandbox is built with besides the meter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    /// Keep `load`, `require` and `package` ([`LUA_LOAD_GRANT`]).
    pub lua_load: bool,
}

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

/// Build the restricted VM with the default globals. No guest code has run
/// when this returns.
pub fn build(meter: &Arc<Meter>) -> mlua::Result<Sandbox> {
    build_with(meter, SandboxOptions::default())
}

/// Build the restricted VM with `options`. No guest code has run when this
/// returns.
pub fn build_with(meter: &Arc<Meter>, options: SandboxOptions) -> mlua::Result<Sandbox> {
    build_observed_with(meter, options, &mut |_| {})
}

/// [`build`], calling `observe` after each [`BuildStep`] (for timing; it
/// gets no access to the VM).
pub fn build_observed(
    meter: &Arc<Meter>,
    observe: &mut dyn FnMut(BuildStep),
) -> mlua::Result<Sandbox> {
    build_observed_with(meter, SandboxOptions::default(), observe)
}

/// [`build_with`], calling `observe` after each [`BuildStep`].
pub fn build_observed_with(
    _meter: &Arc<Meter>,
    options: SandboxOptions,
    observe: &mut dyn FnMut(BuildStep),
) -> mlua::Result<Sandbox> {
    let mut libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
    if options.lua_load {
        libs |= StdLib::PACKAGE;
    }
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
    let kept: Vec<&str> = if options.lua_load {
        prune_package(&globals)?;
        GLOBALS.iter().chain(LUA_LOAD_GLOBALS).copied().collect()
    } else {
        GLOBALS.to_vec()
    };
    keep_only(&globals, &kept)?;
    observe(BuildStep::Globals);
    Ok(Sandbox { lua })
}

/// Remove every string key of `table` not in `kept` (and every other key).
fn keep_only(table: &mlua::Table, kept: &[&str]) -> mlua::Result<()> {
    let mut remove = Vec::new();
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let keep = matches!(&key, Value::String(name) if kept.contains(&&*name.to_string_lossy()));
        if !keep {
            remove.push(key);
        }
    }
    for key in remove {
        table.raw_set(key, Value::Nil)?;
    }
    Ok(())
}

/// `package` as [`LUA_LOAD_GRANT`] leaves it: [`PACKAGE_MEMBERS`] only,
/// and `searchers` holding only Lua's preload searcher (the first entry
/// `luaopen_package` creates), so that `require` finds a module in
/// `package.loaded` or `package.preload` or fails with Lua's own message
/// `module 'NAME' not found:\n\tno field package.preload['NAME']`.
fn prune_package(globals: &mlua::Table) -> mlua::Result<()> {
    let package: mlua::Table = globals.raw_get("package")?;
    keep_only(&package, PACKAGE_MEMBERS)?;
    let searchers: mlua::Table = package.raw_get("searchers")?;
    let preload: Value = searchers.raw_get(1)?;
    if !matches!(preload, Value::Function(_)) {
        return Err(mlua::Error::runtime(
            "package.searchers has no preload searcher",
        ));
    }
    let fresh = searchers.raw_len();
    for index in (2..=fresh.max(4)).rev() {
        searchers.raw_set(index, Value::Nil)?;
    }
    Ok(())
}
