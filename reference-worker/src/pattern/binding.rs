//! The `mlua` binding of the pattern engine (SPEC §15.4): Rust functions
//! that coerce Lua arguments exactly as `lstrlib.c` does, run the engine
//! with the VM's [`Meter`] as its budget and return Lua values, and the Lua
//! half (`strings.lua`) that installs `string.find`, `match`, `gmatch` and
//! `gsub` and raises their errors at the guest's position.
//!
//! Errors cross from Rust to Lua as values, never as Rust errors (which
//! `mlua` would turn into userdata): a failed call returns the token `FAIL`
//! followed by Lua's message, or by `nil` and the number of the bad argument,
//! which the Lua half re-raises through the original library function for
//! Lua's exact argument-error wording. Only a budget stop is raised from
//! Rust. A table or function replacement of `gsub` is driven by the Lua half
//! (so guest code runs as ordinary Lua and its errors pass unchanged), with
//! [`gsub_scan`](super::gsub_scan) finding each match.

use super::{
    Budget, Capture, Found, GmatchCursor, PatternError, Replacement, find, gmatch_next, gsub,
    gsub_scan, lua_match,
};
use crate::meter::{BYTES_PER_UNIT, LimitTrip, Meter};
use mlua::chunk::ChunkMode;
use mlua::{Function, LightUserData, Lua, LuaString, MultiValue, Value};
use std::sync::Arc;

/// `strings.lua`, compiled to Lua bytecode by `build.rs` (trusted, like the
/// prelude; loaded before any guest code exists).
const STRINGS_LUA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/strings.luac"));

/// Results built above this many bytes are charged one unit per 64 bytes
/// (SPEC §15.6, the rule for large copies).
const BIG_BYTES: u64 = 4096;

static FAIL_TOKEN: u8 = 0;
static DRIVE_TOKEN: u8 = 0;

fn token(at: &'static u8) -> Value {
    Value::LightUserData(LightUserData(std::ptr::from_ref(at).cast_mut().cast()))
}

/// The VM's meter as the engine's budget: one instruction unit per step.
struct MeterBudget<'m> {
    meter: &'m Meter,
}

impl Budget for MeterBudget<'_> {
    type Stop = mlua::Error;

    fn charge(&mut self, steps: u64) -> Result<(), mlua::Error> {
        self.meter.charge(steps)
    }

    fn output_limit(&self) -> usize {
        usize::try_from(self.meter.memory_headroom()).unwrap_or(usize::MAX)
    }

    fn output_too_large(&mut self, requested: usize) -> mlua::Error {
        self.meter.trip_limit(LimitTrip::Memory {
            requested: requested as u64,
            used: self.meter.used_memory(),
            limit: self.meter.memory_limit(),
        })
    }
}

/// The guest's arguments to a string function, with their count.
struct Args {
    values: Vec<Value>,
}

impl Args {
    fn new(values: MultiValue) -> Self {
        Self {
            values: values.into_iter().collect(),
        }
    }

    /// Argument `n` (1-based); nil when absent.
    fn get(&self, n: usize) -> Value {
        self.values.get(n - 1).cloned().unwrap_or(Value::Nil)
    }

    /// Argument `n` is bad: `FAIL, nil` and the arguments up to `n` (as many
    /// as the guest passed), for the original function to word the error.
    fn bad(&self, n: usize) -> MultiValue {
        let mut values = MultiValue::from_iter([token(&FAIL_TOKEN), Value::Nil]);
        values.extend(self.values.iter().take(n).cloned());
        values
    }
}

/// The outcome of an engine call as Lua values: a budget stop is raised, a
/// Lua error becomes `FAIL, message`.
fn lua_result(
    lua: &Lua,
    outcome: Result<MultiValue, PatternError<mlua::Error>>,
) -> mlua::Result<MultiValue> {
    match outcome {
        Ok(values) => Ok(values),
        Err(PatternError::Stopped(stop)) => Err(stop),
        Err(PatternError::Lua(message)) => Ok(MultiValue::from_iter([
            token(&FAIL_TOKEN),
            Value::String(lua.create_string(message)?),
        ])),
    }
}

/// `luaL_checklstring`: a string, or a number converted to one.
fn string_arg(lua: &Lua, value: Value) -> mlua::Result<Option<LuaString>> {
    match value {
        Value::String(s) => Ok(Some(s)),
        Value::Integer(_) | Value::Number(_) => lua.coerce_string(value),
        _ => Ok(None),
    }
}

/// `luaL_optinteger`: `default` for nil or none.
fn opt_integer(lua: &Lua, value: Value, default: i64) -> mlua::Result<Option<i64>> {
    match value {
        Value::Nil => Ok(Some(default)),
        Value::Integer(i) => Ok(Some(i)),
        other => lua.coerce_integer(other),
    }
}

fn push_captures(
    lua: &Lua,
    subject: &[u8],
    captures: Vec<Capture>,
    values: &mut MultiValue,
) -> mlua::Result<()> {
    for capture in captures {
        values.push_back(match capture {
            Capture::Text(range) => Value::String(lua.create_string(&subject[range])?),
            Capture::Position(at) => Value::Integer(at as i64),
        });
    }
    Ok(())
}

fn found_values(
    lua: &Lua,
    subject: &[u8],
    found: Option<Found>,
    with_range: bool,
) -> mlua::Result<MultiValue> {
    let Some(found) = found else {
        return Ok(MultiValue::from_iter([Value::Nil]));
    };
    let mut values = MultiValue::new();
    if with_range {
        values.push_back(Value::Integer(found.range.start as i64 + 1));
        values.push_back(Value::Integer(found.range.end as i64));
    }
    push_captures(lua, subject, found.captures, &mut values)?;
    Ok(values)
}

fn find_or_match(lua: &Lua, meter: &Meter, args: Args, is_find: bool) -> mlua::Result<MultiValue> {
    let Some(s) = string_arg(lua, args.get(1))? else {
        return Ok(args.bad(1));
    };
    let Some(p) = string_arg(lua, args.get(2))? else {
        return Ok(args.bad(2));
    };
    let Some(init) = opt_integer(lua, args.get(3), 1)? else {
        return Ok(args.bad(3));
    };
    let plain = args.get(4);
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let mut budget = MeterBudget { meter };
    let outcome = if is_find {
        let plain = !matches!(plain, Value::Nil | Value::Boolean(false));
        find(&s, &p, init, plain, &mut budget)
    } else {
        lua_match(&s, &p, init, &mut budget)
    };
    match outcome {
        Ok(found) => found_values(lua, &s, found, is_find),
        Err(error) => lua_result(lua, Err(error)),
    }
}

fn gmatch_start(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let args = Args::new(args);
    let Some(s) = string_arg(lua, args.get(1))? else {
        return Ok(args.bad(1));
    };
    let Some(p) = string_arg(lua, args.get(2))? else {
        return Ok(args.bad(2));
    };
    let Some(init) = opt_integer(lua, args.get(3), 1)? else {
        return Ok(args.bad(3));
    };
    let cursor = GmatchCursor::new(init, s.as_bytes().len());
    Ok(MultiValue::from_iter([
        Value::String(s),
        Value::String(p),
        Value::Integer(cursor.position as i64),
    ]))
}

/// A 0-based offset from the Lua half (which only passes offsets it got
/// from here); `-1` means none.
fn offset(value: i64) -> Option<usize> {
    usize::try_from(value).ok()
}

fn gmatch_step(
    lua: &Lua,
    meter: &Meter,
    (s, p, position, last): (LuaString, LuaString, i64, i64),
) -> mlua::Result<MultiValue> {
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let mut cursor = GmatchCursor {
        position: offset(position).unwrap_or(0),
        last_match: offset(last),
    };
    let mut budget = MeterBudget { meter };
    match gmatch_next(&s, &p, &mut cursor, &mut budget) {
        Ok(None) => Ok(MultiValue::new()),
        Ok(Some(captures)) => {
            let mut values = MultiValue::from_iter([Value::Integer(cursor.position as i64)]);
            push_captures(lua, &s, captures, &mut values)?;
            Ok(values)
        }
        Err(error) => lua_result(lua, Err(error)),
    }
}

fn gsub_string(lua: &Lua, meter: &Meter, args: MultiValue) -> mlua::Result<MultiValue> {
    let args = Args::new(args);
    let Some(s) = string_arg(lua, args.get(1))? else {
        return Ok(args.bad(1));
    };
    let Some(p) = string_arg(lua, args.get(2))? else {
        return Ok(args.bad(2));
    };
    // Lua reads the maximum before it checks the replacement's type.
    let len = s.as_bytes().len() as i64;
    let Some(max) = opt_integer(lua, args.get(4), len.saturating_add(1))? else {
        return Ok(args.bad(4));
    };
    let repl = args.get(3);
    let repl = match repl {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => string_arg(lua, repl)?,
        Value::Table(_) | Value::Function(_) => {
            return Ok(MultiValue::from_iter([
                token(&DRIVE_TOKEN),
                Value::String(s),
                Value::String(p),
                Value::Integer(max),
            ]));
        }
        _ => None,
    };
    let Some(repl) = repl else {
        return Ok(args.bad(3));
    };
    let (subject, pattern, repl) = (s.as_bytes(), p.as_bytes(), repl.as_bytes());
    let mut budget = MeterBudget { meter };
    match gsub(
        &subject,
        &pattern,
        &Replacement::new(&repl),
        max,
        &mut budget,
    ) {
        // Nothing changed: Lua returns its first argument, which
        // `luaL_checklstring` has turned into a string.
        Ok((None, n)) => Ok(MultiValue::from_iter([Value::String(s), Value::Integer(n)])),
        Ok((Some(out), n)) => Ok(MultiValue::from_iter([
            Value::String(lua.create_string(out)?),
            Value::Integer(n),
        ])),
        Err(error) => lua_result(lua, Err(error)),
    }
}

fn gsub_step(
    lua: &Lua,
    meter: &Meter,
    (s, p, src, last, first_only): (LuaString, LuaString, i64, i64, bool),
) -> mlua::Result<MultiValue> {
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let mut budget = MeterBudget { meter };
    let (src, last) = (offset(src).unwrap_or(0), offset(last));
    match gsub_scan(&s, &p, src, last, first_only, &mut budget) {
        Ok(None) => Ok(MultiValue::new()),
        Ok(Some(found)) => {
            let mut values = MultiValue::from_iter([
                Value::Integer(found.range.start as i64),
                Value::Integer(found.range.end as i64),
            ]);
            push_captures(lua, &s, found.captures, &mut values)?;
            Ok(values)
        }
        Err(error) => lua_result(lua, Err(error)),
    }
}

/// Install the budgeted `string.find`, `string.match`, `string.gmatch` and
/// `string.gsub` into `lua`'s `string` table. Run before the sandbox
/// prelude, while the original library functions (used only to word
/// argument errors) are still in place.
pub fn install(lua: &Lua, meter: &Arc<Meter>) -> mlua::Result<()> {
    let native_find = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, args| find_or_match(lua, &meter, Args::new(args), true))?
    };
    let native_match = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, args: MultiValue| {
            let mut args = Args::new(args);
            args.values.truncate(3);
            find_or_match(lua, &meter, args, false)
        })?
    };
    let native_gmatch_start = lua.create_function(gmatch_start)?;
    let native_gmatch_step = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, args| gmatch_step(lua, &meter, args))?
    };
    let native_gsub = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, args| gsub_string(lua, &meter, args))?
    };
    let native_gsub_step = {
        let meter = Arc::clone(meter);
        lua.create_function(move |lua, args| gsub_step(lua, &meter, args))?
    };
    let charge_output = {
        let meter = Arc::clone(meter);
        lua.create_function(move |_, len: i64| {
            let len = u64::try_from(len).unwrap_or(0);
            if len > BIG_BYTES {
                meter.charge(len / BYTES_PER_UNIT)?;
            }
            Ok(())
        })?
    };
    let natives = lua.create_table()?;
    natives.raw_set("find", native_find)?;
    natives.raw_set("match", native_match)?;
    natives.raw_set("gmatch_start", native_gmatch_start)?;
    natives.raw_set("gmatch_step", native_gmatch_step)?;
    natives.raw_set("gsub", native_gsub)?;
    natives.raw_set("gsub_step", native_gsub_step)?;
    natives.raw_set("charge_output", charge_output)?;
    let chunk: Function = lua
        .load(STRINGS_LUA)
        .set_name("=sandbox")
        .set_mode(ChunkMode::Binary)
        .into_function()?;
    chunk.call::<()>((natives, token(&FAIL_TOKEN), token(&DRIVE_TOKEN)))
}
