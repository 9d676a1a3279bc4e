//! The dispatch check of the metered VM is also its only per-instruction
//! test of `trap` (DESIGN §15.6, `metered-lua/README.md`): where
//! `luaV_execute` sets `trap` (a hook, a stack reallocation), the meter
//! empties its slice so that the next dispatch takes the slow path. Hooks
//! must therefore fire exactly as in stock Lua, stack reallocations must
//! leave every frame correct, and no unit may be lost or counted twice
//! by the forced slow paths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mlua::Lua;
use quirl_lua_metered_vm as vm;
use quirl_lua_testkit::stock;

/// Line, call, return and count hooks, and hooks that stay set across
/// stack reallocations (a deep non-tail recursion grows the stack many
/// times; a full collection shrinks it again).
const HOOKED: &str = r#"
local events = {}
local function hook(event, line)
  events[#events + 1] = event .. (line and (":" .. line) or "")
end
local function f(n)
  if n == 0 then return 0 end
  return 1 + f(n - 1)
end
debug.sethook(hook, "lcr")
local x = 0
for i = 1, 3 do
  x = x + f(2)
end
debug.sethook()
local counts = 0
debug.sethook(function() counts = counts + 1 end, "", 3)
local s = 0
for i = 1, 1000 do s = s + i end
debug.sethook()
local function deep(n)
  if n == 0 then return 0 end
  return deep(n - 1) + 1
end
local ticks = 0
debug.sethook(function() ticks = ticks + 1 end, "", 1)
local d1 = deep(5000)
collectgarbage()
local d2 = deep(3000)
debug.sethook()
local lines = 0
debug.sethook(function() lines = lines + 1 end, "l")
local co = coroutine.wrap(function(a)
  local b = coroutine.yield(a + 1)
  return deep(200) + b
end)
local y = co(1) + co(10)
debug.sethook()
return table.concat(events, " ") .. "|" .. counts .. "|" .. ticks .. "|" ..
  d1 .. "|" .. d2 .. "|" .. x .. "|" .. s .. "|" .. lines .. "|" .. y
"#;

fn unrestricted() -> Lua {
    // SAFETY: the test wants the `debug` library (hooks), which mlua only
    // opens in an unrestricted state; nothing here loads binary chunks.
    unsafe { Lua::unsafe_new() }
}

#[test]
fn hooks_fire_as_in_stock_lua() {
    let expected = stock::run(HOOKED, "=hooked").expect("stock Lua runs the program");
    let lua = unrestricted();
    let ours: String = lua
        .load(HOOKED)
        .set_name("=hooked")
        .eval()
        .expect("the metered VM runs the program");
    assert_eq!(ours, expected);
    // The program saw hooks fire: not a vacuous comparison.
    let parts: Vec<&str> = ours.split('|').collect();
    assert!(
        parts[0].contains("line:") && parts[0].contains("call"),
        "{ours}"
    );
    assert!(parts[1].parse::<u64>().unwrap() > 300, "{ours}");
    assert!(parts[2].parse::<u64>().unwrap() > 8000, "{ours}");
}

#[test]
fn hooks_fire_as_in_stock_lua_inside_a_budget_window() {
    let expected = stock::run(HOOKED, "=hooked").expect("stock Lua runs the program");
    let lua = unrestricted();
    let state = lua.state();
    // SAFETY: `state` is the live main state of `lua`, used on this thread
    // only; no cancellation flag is given.
    unsafe {
        vm::lua_meter_configure(state, 0, std::ptr::null(), 0);
        vm::lua_meter_begin(state, 100_000_000, 60_000_000_000);
    }
    let ours: String = lua.load(HOOKED).set_name("=hooked").eval().unwrap();
    let mut status = vm::MeterStatus::default();
    // SAFETY: as above; the call only fills `status`.
    unsafe { vm::lua_meter_status(state, &mut status) };
    assert_eq!(ours, expected);
    assert_eq!(status.stop, vm::LUAQ_RUNNING);
    assert!(status.used > 10_000, "{status:?}");
}

/// The units a chunk uses when called in a window of its own (compiled
/// before the window opens: compiling is charged by the source's length).
fn units_used(lua: &Lua, source: &str) -> i64 {
    let state = lua.state();
    let chunk = lua.load(source).into_function().unwrap();
    // SAFETY: `state` is the live main state of `lua`, used on this thread.
    unsafe { vm::lua_meter_begin(state, 100_000_000, 60_000_000_000) };
    chunk.call::<()>(()).unwrap();
    let mut status = vm::MeterStatus::default();
    // SAFETY: as above.
    unsafe {
        vm::lua_meter_status(state, &mut status);
        vm::lua_meter_end(state);
    }
    assert_eq!(status.stop, vm::LUAQ_RUNNING, "{status:?}");
    status.used
}

#[test]
fn a_forced_dispatch_counts_exactly_one_unit() {
    // A count hook of 1 with a C function as the hook (`type`, which runs
    // no Lua instruction) keeps `trap` set, so every dispatch of the loop
    // takes the forced slow path. The loop must cost the same units with
    // and without it: what the hook adds is only the two `sethook` calls,
    // measured on their own.
    const LOOP: &str = "local s = 0 for i = 1, 5000 do s = s + i * 2 end g = s";
    const HOOKED_LOOP: &str = "debug.sethook(type, '', 1) \
        local s = 0 for i = 1, 5000 do s = s + i * 2 end g = s debug.sethook()";
    const HOOKS_ALONE: &str = "debug.sethook(type, '', 1) local s = 0 debug.sethook()";
    const EMPTY: &str = "local s = 0";
    let lua = unrestricted();
    let state = lua.state();
    // SAFETY: `state` is the live main state of `lua`, used on this thread.
    unsafe { vm::lua_meter_configure(state, 0, std::ptr::null(), 0) };
    // Warm up: every string and stack slot the chunks need exists, so no
    // allocation (charged by its bytes) differs between the runs below.
    for source in [LOOP, HOOKED_LOOP, HOOKS_ALONE, EMPTY] {
        units_used(&lua, source);
    }
    let plain = units_used(&lua, LOOP) - units_used(&lua, EMPTY);
    let hooked = units_used(&lua, HOOKED_LOOP) - units_used(&lua, HOOKS_ALONE);
    assert_eq!(hooked, plain);
    assert!(plain >= 5000 * 3, "{plain}");
    assert_eq!(lua.globals().get::<i64>("g").unwrap(), 5000 * 5001);
}

#[test]
fn a_limit_trips_exactly_while_every_dispatch_is_forced() {
    // DESIGN §15.6-a: the limit trips at the first unit past it.
    // The limit trips at the first unit past it (DESIGN §15.6), also while
    // a hook keeps every dispatch on the slow path and a deep recursion
    // keeps reallocating the stack.
    const LOOP: &str = r#"
      debug.sethook(type, "", 1)
      local function deep(n) if n == 0 then return 0 end return deep(n - 1) + 1 end
      local s = 0
      for i = 1, 1e9 do s = s + deep(i % 700) end
      return s
    "#;
    for limit in [1_234_567, 77_777] {
        let lua = unrestricted();
        let state = lua.state();
        // SAFETY: `state` is the live main state of `lua`, on this thread.
        unsafe {
            vm::lua_meter_configure(state, 0, std::ptr::null(), 0);
            vm::lua_meter_begin(state, limit, 60_000_000_000);
        }
        let result = lua.load(LOOP).eval::<i64>();
        let mut status = vm::MeterStatus::default();
        // SAFETY: as above.
        unsafe { vm::lua_meter_status(state, &mut status) };
        assert!(result.is_err());
        assert_eq!(status.stop, vm::LUAQ_INSTRUCTIONS, "{status:?}");
        assert_eq!(status.used, limit + 1, "{status:?}");
    }
}
