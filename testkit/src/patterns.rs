//! Differential fuzzing of the budgeted pattern matcher (DESIGN §15.4): the
//! same harness runs in an unrestricted state (the metered Lua with no
//! budget window: Lua 5.4's `lstrlib.c` as it stands) and in a state whose
//! meter is attached as the sandbox attaches it, with a budget window, so
//! that every matcher step is charged; results and error messages must be
//! equal. A case the budget stops (5,000,000 units) is not run unbounded,
//! which would take as long without a bound.

use mlua::{Function, Lua, MultiValue, Value};
use quirl_lua_reference_worker::budget::Meter;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const STEP_LIMIT: u64 = 5_000_000;

/// The harness shared with `reference-worker/tests/pattern_differential.rs`
/// (`fixtures/lua/pattern_differential_harness.lua`): `kind` 1
/// find, 2 match, 3 gmatch (up to 40 iterations), 4 gsub with `a` as the
/// replacement, 5 gsub with the function, table or number `sel` chooses.
const HARNESS: &str = include_str!("../../fixtures/lua/pattern_differential_harness.lua");

struct Engine {
    lua: Lua,
    harness: Function,
    meter: Arc<Meter>,
}

struct States {
    c_lua: Lua,
    c: Function,
    engine: Engine,
}

fn harness(lua: &Lua) -> Option<Function> {
    lua.load(HARNESS).set_name("harness").call(()).ok()
}

fn engine() -> Option<Engine> {
    let lua = Lua::new();
    let meter = Arc::new(Meter::new(
        1 << 30,
        STEP_LIMIT,
        Arc::new(AtomicBool::new(false)),
    ));
    let harness = harness(&lua)?;
    // As the sandbox does (DESIGN §15.6): charges, limits and no addresses.
    meter.attach(&lua);
    Some(Engine {
        lua,
        harness,
        meter,
    })
}

fn states() -> Option<States> {
    let c_lua = Lua::new();
    let c = harness(&c_lua)?;
    Some(States {
        c_lua,
        c,
        engine: engine()?,
    })
}

thread_local! {
    static STATES: RefCell<Option<States>> = RefCell::new(states());
}

/// One decoded call.
struct Call<'d> {
    kind: i64,
    sel: i64,
    s: &'d [u8],
    p: &'d [u8],
    a: Arg<'d>,
    b: Arg<'d>,
}

enum Arg<'d> {
    Nil,
    Int(i64),
    True,
    Bytes(&'d [u8]),
}

fn int_arg<'d>(byte: u8) -> Arg<'d> {
    match byte {
        0..=63 => Arg::Nil,
        64..=71 => Arg::True,
        _ => Arg::Int(i64::from(byte % 33) - 16),
    }
}

/// Header bytes kind, sel, a, b; then subject, pattern and replacement
/// separated by 0xff bytes (the subject is cut at 24 bytes).
fn decode(data: &[u8]) -> Option<Call<'_>> {
    let (&[kind, sel, a, b], rest) = data.split_first_chunk::<4>()?;
    let mut parts = rest.splitn(3, |&byte| byte == 0xff);
    let s = parts.next().unwrap_or_default();
    let s = &s[..s.len().min(24)];
    let p = parts.next().unwrap_or_default();
    let repl = parts.next().unwrap_or_default();
    let kind = i64::from(kind % 5) + 1;
    Some(Call {
        kind,
        sel: i64::from(sel % 10),
        s,
        p,
        a: if kind == 4 {
            Arg::Bytes(repl)
        } else {
            int_arg(a)
        },
        b: int_arg(b),
    })
}

fn value(lua: &Lua, arg: &Arg<'_>) -> Value {
    match arg {
        Arg::Nil => Value::Nil,
        Arg::True => Value::Boolean(true),
        Arg::Int(i) => Value::Integer(*i),
        Arg::Bytes(b) => lua.create_string(b).map_or(Value::Nil, Value::String),
    }
}

fn run(lua: &Lua, harness: &Function, call: &Call<'_>) -> Result<String, String> {
    let string = |b: &[u8]| lua.create_string(b).map_err(|e| e.to_string());
    let args = MultiValue::from_iter([
        Value::Integer(call.kind),
        Value::String(string(call.s)?),
        Value::String(string(call.p)?),
        value(lua, &call.a),
        value(lua, &call.b),
        Value::Integer(call.sel),
    ]);
    let (ok, text): (bool, Value) = harness.call(args).map_err(|e| e.to_string())?;
    let text = match text {
        Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        other => format!("{other:?}"),
    };
    Ok(format!("{}: {text}", if ok { "ok" } else { "error" }))
}

/// The target: decode one call, run it in both states, compare.
pub fn pattern_differential(data: &[u8]) {
    let Some(call) = decode(data) else {
        return;
    };
    STATES.with(|cell| {
        let mut guard = cell.borrow_mut();
        let Some(states) = guard.as_mut() else {
            panic!("the Lua states could not be built");
        };
        states
            .engine
            .meter
            .begin(STEP_LIMIT, Duration::from_secs(3600));
        let actual = run(&states.engine.lua, &states.engine.harness, &call);
        if states.engine.meter.stopped().is_some() {
            // Over the step budget: C would run as long, unbounded. A
            // stopped meter never resets, so the engine state is rebuilt.
            match engine() {
                Some(fresh) => states.engine = fresh,
                None => panic!("the engine state could not be rebuilt"),
            }
            return;
        }
        let expected = run(&states.c_lua, &states.c, &call);
        assert_eq!(
            actual,
            expected,
            "engine differs from C Lua: kind {} s {:?} p {:?}",
            call.kind,
            String::from_utf8_lossy(call.s),
            String::from_utf8_lossy(call.p)
        );
    });
}
