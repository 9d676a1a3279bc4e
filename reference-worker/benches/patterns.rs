//! Lua patterns (DESIGN §15.4): the metered matcher with its charges against
//! the same matcher without a budget window, on typical patterns. Each
//! workload is one Lua function run in two states of the metered Lua: one
//! plain (no window: the charges fall into an idle slice) and one with the
//! meter attached as the sandbox attaches it and a window with an
//! unreachable limit, so every step is counted and charged. The stock-Lua
//! comparison of whole programs is `bench/scripts/stock_compare.sh`. The
//! two run round-robin; the table gives the median per call and the ratio
//! (engine / C). Samples are measured in CPU time of the thread, not wall
//! time: on a shared machine a longer sample spans more time slices of other
//! processes, which wall time would charge to it.
//!
//! ```sh
//! cargo bench -p quirl-lua-reference-worker --bench patterns
//! ```
//!
//! Without `--bench` (as under `cargo test --all-targets`) every workload
//! runs once in both states and must give the same result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mlua::{Function, Lua, Value};
use quirl_lua_reference_worker::budget::Meter;
use rustix::time::{ClockId, clock_gettime};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const TEXT: &str = "The quick brown fox jumps over the lazy dog; key=value pairs, \
    trimmed   text and a needle in the haystack of ordinary words, numbers 12 345 6789.";

/// (name, calls per run, Lua source returning a function of `n` that
/// makes `n` calls and returns a checksum).
const WORKLOADS: &[(&str, u32, &str)] = &[
    (
        "gmatch word split (%a+)",
        200,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do for w in text:gmatch("%a+") do c = c + #w end end return c end"#,
    ),
    (
        "match key=value ((%w+)=(%w+))",
        2000,
        r#"return function(n) local c = 0
          for _ = 1, n do local k, v = ("key=value"):match("(%w+)=(%w+)") c = c + #k + #v end return c end"#,
    ),
    (
        "match trim (^%s*(.-)%s*$)",
        2000,
        r#"return function(n) local c = 0
          for _ = 1, n do c = c + #("   some padded text   "):match("^%s*(.-)%s*$") end return c end"#,
    ),
    (
        "gsub with function (%w+)",
        200,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do local s, k = text:gsub("%w+", function(w) return #w end) c = c + #s + k end return c end"#,
    ),
    (
        "gsub with string (%s+ -> ' ')",
        200,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do local s, k = text:gsub("%s+", " ") c = c + #s + k end return c end"#,
    ),
    (
        "find plain (needle, plain=true)",
        2000,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do c = c + text:find("needle", 1, true) end return c end"#,
    ),
    (
        "call floor: probe(text, 'x') (C: string.len; engine state: an empty mlua callback)",
        2000,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do c = c + (probe(text, "x") > 0 and 1 or 0) end return c end"#,
    ),
    (
        "find pattern (n%a+e)",
        2000,
        r#"local text = ... return function(n) local c = 0
          for _ = 1, n do c = c + text:find("n%a+e") end return c end"#,
    ),
];

fn workload(lua: &Lua, source: &str) -> Function {
    lua.load(source).call(TEXT).unwrap()
}

fn thread_cpu() -> Duration {
    let now = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn time(function: &Function, calls: u32) -> (Duration, i64) {
    let start = thread_cpu();
    let checksum: i64 = function.call(calls).unwrap();
    (thread_cpu() - start, checksum)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|arg| arg == "--bench");
    // `--only TEXT`: just the workloads whose name contains TEXT (profiling).
    let only = args
        .iter()
        .position(|arg| arg == "--only")
        .and_then(|at| args.get(at + 1).cloned());
    let c_lua = Lua::new();
    let engine_lua = Lua::new();
    let meter = Arc::new(Meter::new(
        1 << 30,
        u64::MAX,
        Arc::new(AtomicBool::new(false)),
    ));
    // As the sandbox does: the meter attached, a budget window open, so
    // every matcher step is counted and charged (DESIGN §15.4, §15.6).
    meter.attach(&engine_lua);
    meter.begin(u64::MAX / 2, Duration::from_secs(86_400));
    // The floor of any binding through mlua's safe callbacks: a Rust
    // function that takes two strings and returns an integer, against a C
    // library function of the same shape.
    c_lua.load("probe = string.len").exec().unwrap();
    let probe = engine_lua
        .create_function(|_, (s, _p): (mlua::LuaString, mlua::LuaString)| {
            Ok(s.as_bytes().len() as i64)
        })
        .unwrap();
    engine_lua.globals().set("probe", probe).unwrap();
    // Both states must really differ in their matcher.
    assert!(matches!(
        engine_lua
            .load("return string.find")
            .eval::<Value>()
            .unwrap(),
        Value::Function(_)
    ));

    let rounds = if benching { 31 } else { 1 };
    let rounds = if only.is_some() { rounds * 20 } else { rounds };
    println!("| workload | C Lua per call | engine per call | ratio |");
    println!("|---|---|---|---|");
    for &(name, calls, source) in WORKLOADS {
        if only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            continue;
        }
        let c = workload(&c_lua, source);
        let engine = workload(&engine_lua, source);
        let calls = if benching { calls } else { 1 };
        // Warm up both, and check they compute the same thing.
        let (_, expected) = time(&c, calls);
        let (_, actual) = time(&engine, calls);
        assert_eq!(actual, expected, "{name}: engine and C Lua differ");
        let mut c_samples = Vec::new();
        let mut engine_samples = Vec::new();
        for _ in 0..rounds {
            c_samples.push(time(&c, calls).0);
            engine_samples.push(time(&engine, calls).0);
        }
        let c_call = median(c_samples) / calls;
        let engine_call = median(engine_samples) / calls;
        println!(
            "| {name} | {:.2} µs | {:.2} µs | {:.2}x |",
            c_call.as_secs_f64() * 1e6,
            engine_call.as_secs_f64() * 1e6,
            engine_call.as_secs_f64() / c_call.as_secs_f64()
        );
    }
    assert!(meter.stopped().is_none(), "the meter never stops here");
}
