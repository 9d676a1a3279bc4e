//! The restricted Lua 5.4 environment.
//!
//! [`build`] creates a VM with only `base`, `string`, `table`, `math`,
//! `utf8` and `coroutine`, runs the trusted prelude (`sandbox.lua`), prunes
//! the globals to [`GLOBALS`], protects the shared string metatable and
//! installs the count hook for every thread. It does not set the memory
//! limit or the allocator gate (the VM owner does that once the SDK is
//! installed, see `vm.rs`), and it knows nothing about the protocol.
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
use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Value, VmState};
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

const PRELUDE: &str = include_str!("sandbox.lua");

/// Copies above this many bytes are charged (one unit per 64 bytes).
const BIG_BYTES: u64 = 4096;

/// A freshly built sandbox.
pub struct Sandbox {
    /// The VM.
    pub lua: Lua,
    /// Starts a new coroutine-accounting generation; call at every budget
    /// reset.
    pub next_generation: Function,
}

/// Build the restricted VM. No guest code has run when this returns.
pub fn build(meter: &Arc<Meter>) -> mlua::Result<Sandbox> {
    let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
    let lua = Lua::new_with(libs, LuaOptions::new())?;
    lua.remove_warning_function();

    // The string metatable is shared by every string; `__metatable` makes
    // getmetatable("") return `false` instead of the real table.
    lua.load("getmetatable('').__metatable = false")
        .set_name("=sandbox")
        .set_mode(ChunkMode::Text)
        .exec()?;

    let guard = {
        let meter = Arc::clone(meter);
        lua.create_function(move |_, ()| meter.guard())?
    };
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
    // Budgeted patterns (SPEC §15.4), installed while the original string
    // library is still in place.
    crate::pattern::install(&lua, meter)?;
    let rewriter = library_call::rewriter(&lua)?;
    let as_library = {
        let rewriter = rewriter.clone();
        lua.create_function(move |lua, wrapper: Function| {
            library_call::library_function(lua, wrapper, &rewriter)
        })?
    };
    // Level 0 is this helper; the library call is the first C function above.
    let caller_where = lua.create_function(|lua, ()| Ok(library_call::caller_position(lua, 1)))?;
    let next_generation: Function = lua
        .load(PRELUDE)
        .set_name(format!("={}", library_call::SANDBOX_ID))
        .set_mode(ChunkMode::Text)
        .call((
            guard,
            charge,
            reserve_rep,
            meter.interval(),
            as_library,
            caller_where,
        ))?;
    library_call::install(&lua, &rewriter)?;

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
    Ok(Sandbox {
        lua,
        next_generation,
    })
}

/// Install the count hook. A global hook is inherited by every coroutine a
/// script creates (Lua copies the hook into new threads), unlike a per-thread
/// hook. Installing it again resets the main thread's instruction counter,
/// which is what a budget reset wants.
pub fn install_hook(lua: &Lua, meter: &Arc<Meter>) -> mlua::Result<()> {
    let interval = meter.interval();
    let meter = Arc::clone(meter);
    let count = u32::try_from(interval).unwrap_or(u32::MAX);
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(count),
        move |_, _| {
            meter.charge(interval)?;
            Ok(VmState::Continue)
        },
    )
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

/// string.rep's result must fit in the memory headroom; its copying is
/// charged. Arguments the original would reject are left to it.
fn reserve_rep(lua: &Lua, meter: &Meter, s: Value, n: Value, sep: Value) -> mlua::Result<()> {
    let Some(len) = coerced_len(lua, s)? else {
        return Ok(());
    };
    let Some(count) = lua.coerce_integer(n)? else {
        return Ok(());
    };
    let sep_len = match sep {
        Value::Nil => 0,
        other => match coerced_len(lua, other)? {
            Some(len) => len,
            None => return Ok(()),
        },
    };
    if count <= 0 || (len == 0 && sep_len == 0) {
        return Ok(());
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
    let total = total as u64;
    if total > BIG_BYTES {
        meter.charge(total / crate::meter::BYTES_PER_UNIT)?;
    }
    Ok(())
}
