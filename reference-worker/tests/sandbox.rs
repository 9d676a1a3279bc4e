//! The sandbox and its budgets, through the VM API: what a guest can reach,
//! and every escape and evasion attempt ending as an error or a limit trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use quirl_lua_protocol::records::Operation;
use quirl_lua_reference_worker::sandbox::GLOBALS;
use quirl_lua_reference_worker::{ErrorCode, Verdict};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const BIG: Budgets = Budgets {
    allow_process: false,
    memory_limit_bytes: 16 * 1024 * 1024,
    instruction_limit: 100_000_000,
    wall_time_ms: 10_000,
};

#[test]
fn answers_the_quirl_fixture_eval() {
    assert_eq!(success(eval(&mut vm(), "return 42")), json!(42));
}

#[test]
fn evaluates_expressions_like_quirl() {
    let mut vm = vm();
    assert_eq!(success(eval(&mut vm, "6 * 7")), json!(42));
    assert_eq!(success(eval(&mut vm, "local x = 2; return x")), json!(2));
    assert_eq!(success(eval(&mut vm, "x = 1")), json!(null));
}

#[test]
fn reachable_globals_are_exactly_the_documented_list() {
    let value = success(eval(
        &mut vm(),
        "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t",
    ));
    let mut expected: Vec<&str> = GLOBALS.to_vec();
    expected.sort_unstable();
    assert_eq!(value, json!(expected));
}

// SPEC §15.1-e
#[test]
fn every_removed_global_is_absent() {
    let mut vm = vm();
    for name in [
        "load",
        "loadstring",
        "loadfile",
        "dofile",
        "require",
        "print",
        "warn",
        "io",
        "os",
        "package",
        "debug",
        "module",
        "setfenv",
        "getfenv",
        "unpack",
        "newproxy",
        "jit",
        "ffi",
    ] {
        assert_eq!(
            success(eval(&mut vm, &format!("return {name} == nil"))),
            json!(true),
            "{name} must be removed"
        );
    }
    assert_eq!(
        success(eval(&mut vm, "return string.dump == nil")),
        json!(true)
    );
}

#[test]
fn library_tables_hold_only_the_documented_functions() {
    let value = success(eval(
        &mut vm(),
        "local out = {} for _, lib in ipairs({'string', 'table', 'math', 'utf8', 'coroutine'}) do
           local names = {} for k in pairs(_G[lib]) do names[#names + 1] = k end
           table.sort(names) out[lib] = table.concat(names, ',') end return out",
    ));
    assert_eq!(
        value["string"],
        "byte,char,find,format,gmatch,gsub,len,lower,match,pack,packsize,rep,reverse,sub,unpack,upper"
    );
    assert_eq!(value["table"], "concat,insert,move,pack,remove,sort,unpack");
    assert_eq!(value["utf8"], "char,charpattern,codepoint,codes,len,offset");
    assert_eq!(
        value["coroutine"],
        "close,create,isyieldable,resume,running,status,wrap,yield"
    );
}

// SPEC §14.2-a, §15.1-e
#[test]
fn bytecode_is_never_loaded() {
    let mut vm = vm();
    let error = failure(eval(
        &mut vm,
        "\u{1b}Lua\u{54}\u{0}\u{19}\u{93}\r\n\u{1a}\n",
    ));
    assert_eq!(error.code, ErrorCode::Lua);
    let error = failure(vm.handle(Operation::Check {
        source: "\u{1b}LuaT".to_owned(),
        source_name: "x".to_owned(),
    }));
    assert_eq!(error.code, ErrorCode::Lua);
}

/// SPEC §15.1, DESIGN §15.3: the worker loads its own prelude as precompiled bytecode, but
/// every guest source is loaded in text mode only: a source that starts
/// like a binary chunk is refused by the loader's mode check, whatever the
/// operation.
#[test]
fn guest_sources_are_loaded_as_text_only() {
    let chunk = "\u{1b}LuaT return 1";
    let named = |source: &str| (source.to_owned(), "guest.lua".to_owned());
    let operations = [
        Operation::Eval {
            source: chunk.to_owned(),
        },
        {
            let (source, source_name) = named(chunk);
            Operation::Check {
                source,
                source_name,
            }
        },
        {
            let (source, source_name) = named(chunk);
            Operation::LoadConfig {
                source,
                source_name,
            }
        },
        {
            let (source, source_name) = named(chunk);
            Operation::LoadPlugin {
                source,
                source_name,
            }
        },
        {
            let (source, source_name) = named(chunk);
            Operation::Test {
                source,
                source_name,
            }
        },
    ];
    for operation in operations {
        let label = format!("{operation:?}");
        let mut vm = vm();
        let error = failure(vm.handle(operation));
        assert_eq!(error.code, ErrorCode::Lua, "{label}");
        let text = format!("{} {}", error.message, error.context.join(" "));
        assert!(
            text.contains("attempt to load a binary chunk (mode is 't')"),
            "{label}: {text}"
        );
        // The VM stays usable, and still has no loader.
        assert_eq!(
            success(eval(&mut vm, "return load == nil and string.dump == nil")),
            json!(true),
            "{label}"
        );
    }
}

#[test]
fn patterns_run_in_the_budgeted_engine_and_literal_find_works() {
    // DESIGN §15.4: patterns are available; exactness against C Lua is
    // tests/pattern_differential.rs, this checks them through the VM.
    let mut vm = vm();
    for (source, expected) in [
        (
            "return string.match('key=val', '(%w+)=(%w+)')",
            json!("key"),
        ),
        (
            "return {('key=val'):match('(%w+)=(%w+)')}",
            json!(["key", "val"]),
        ),
        ("return ('  x  '):match('^%s*(.-)%s*$')", json!("x")),
        ("return {('abc'):gsub('b', 'x')}", json!(["axc", 1])),
        (
            "local t = {} for w in ('one two'):gmatch('%a+') do t[#t + 1] = w end return t",
            json!(["one", "two"]),
        ),
        ("return {string.find('abc', 'b.')}", json!([2, 3])),
        ("return ('abc'):find('b', 1, false)", json!(2)),
        (
            "return ('abc'):gsub('%w', function(c) return c:upper() end)",
            json!("ABC"),
        ),
        (
            "local ok, e = pcall(string.match, 'a', '[a') return e",
            json!("malformed pattern (missing ']')"),
        ),
        (
            "local ok, e = pcall(function() local r = ('a'):gsub('a', {a = {}}) return r end) return e",
            json!("eval:1: invalid replacement value (a table)"),
        ),
        // Behind library calls (DESIGN §15.11): a tail call keeps the guest's
        // position, a method call's argument error does not count self.
        (
            "local ok, e = pcall(function() return ('a'):gsub('a', {a = {}}) end) return e",
            json!("eval:1: invalid replacement value (a table)"),
        ),
        (
            "local ok, e = pcall(function() return ('x'):find() end) return e",
            json!("eval:1: bad argument #1 to 'find' (string expected, got no value)"),
        ),
    ] {
        assert_eq!(success(eval(&mut vm, source)), expected, "{source}");
    }
    assert_eq!(
        success(eval(
            &mut vm,
            "return {string.find('hello world', 'o w', 1, true)}"
        )),
        json!([5, 7])
    );
    assert_eq!(
        success(eval(&mut vm, "return {('aaa'):find('a', -1, true)}")),
        json!([3, 3])
    );
    assert_eq!(
        success(eval(
            &mut vm,
            "return select('#', ('abc'):find('', 10, true))"
        )),
        json!(1)
    );
    assert_eq!(
        success(eval(&mut vm, "return {('abc'):find('', 2, true)}")),
        json!([2, 1])
    );
    assert_eq!(
        success(eval(
            &mut vm,
            "return select('#', ('abc'):find('z', 1, true))"
        )),
        json!(1)
    );
}

#[test]
fn the_string_metatable_cannot_be_reached() {
    let mut vm = vm();
    assert_eq!(
        success(eval(&mut vm, "return getmetatable('')")),
        json!(false)
    );
    failure(eval(&mut vm, "getmetatable('').__index = {}"));
    failure(eval(&mut vm, "setmetatable('', {})"));
    assert_eq!(success(eval(&mut vm, "return ('x'):upper()")), json!("X"));
}

#[test]
fn guest_finalizers_never_run() {
    // DESIGN §15.5-a: a raw `__gc` is accepted and inert (no object is
    // marked for finalization); one added after setmetatable, or
    // reachable only through __index, never marks one either.
    let mut vm = vm_with(BIG);
    let value = success(eval(
        &mut vm,
        "ran = false
         local fin = function() ran = true end
         local t = setmetatable({}, {__gc = fin})
         local kept = getmetatable(t).__gc == fin
         setmetatable({}, {__gc = false})
         local mt = setmetatable({}, {__index = {__gc = fin}})
         do local u = setmetatable({}, mt) end
         local late = {} do local u = setmetatable({}, late) end
         late.__gc = fin
         t = nil
         for i = 1, 200 do local garbage = string.rep('x', 100000) end
         collectgarbage()
         return {ran = ran, kept = kept}",
    ));
    assert_eq!(value, json!({"ran": false, "kept": true}));
    assert_eq!(
        success(eval(&mut vm, "collectgarbage() return ran")),
        json!(false)
    );
}

#[test]
fn collectgarbage_switches_work_and_collections_are_charged() {
    // DESIGN §15.3: every option of Lua 5.4 works (the tuning ones with
    // their parameters clamped, tests/collector.rs).
    let mut vm = vm();
    assert!(success(eval(&mut vm, "return collectgarbage('count')")).is_number());
    assert_eq!(success(eval(&mut vm, "return collectgarbage()")), json!(0));
    assert_eq!(
        success(eval(&mut vm, "return collectgarbage('collect')")),
        json!(0)
    );
    assert!(success(eval(&mut vm, "return collectgarbage('step')")).is_boolean());
    assert_eq!(
        success(eval(&mut vm, "return collectgarbage('isrunning')")),
        json!(true)
    );
    assert_eq!(
        success(eval(
            &mut vm,
            "return {collectgarbage('stop'), collectgarbage('isrunning'), \
             collectgarbage('restart'), collectgarbage('isrunning'), \
             collectgarbage('generational'), collectgarbage('incremental'), \
             collectgarbage('setpause', 200), collectgarbage('setstepmul', 100)}"
        )),
        json!([0, false, 0, true, "incremental", "generational", 200, 100])
    );
    // A collection is charged by the collector's work, the objects it
    // marks and sweeps (DESIGN §15.6): 80,000 tables, built 1,000 a
    // request, cost more than a request's 20,000 units to collect.
    let mut small = vm_with(Budgets {
        instruction_limit: 20_000,
        ..BIG
    });
    success(eval(&mut small, "return collectgarbage()"));
    for _ in 0..80 {
        success(eval(
            &mut small,
            "chunks = chunks or {} local c = {} for i = 1, 1000 do c[i] = {} end \
             chunks[#chunks + 1] = c",
        ));
    }
    assert_eq!(
        tripped(eval(&mut small, "return collectgarbage()")),
        "instructions"
    );
}

#[test]
fn globals_and_callbacks_persist_across_requests() {
    let mut vm = vm();
    success(eval(
        &mut vm,
        "counter = 41 function bump() counter = counter + 1 return counter end",
    ));
    assert_eq!(success(eval(&mut vm, "return bump()")), json!(42));
    assert_eq!(success(eval(&mut vm, "return bump()")), json!(43));
}

// SPEC §15.1-c
#[test]
fn budgets_reset_for_every_request() {
    let mut vm = vm();
    for _ in 0..3 {
        success(eval(
            &mut vm,
            "local n = 0 for i = 1, 200000 do n = n + i end return n",
        ));
    }
}

#[test]
fn a_repeated_eval_source_runs_like_a_freshly_loaded_chunk() {
    // The worker keeps the last compiled eval chunk; running it again must
    // be indistinguishable from loading the source again.
    let mut vm = vm();
    let source = "local seen = {} seen[#seen + 1] = 1 runs = (runs or 0) + 1 \
                  local function f() return #seen end return {runs, f(), select('#', ...)}";
    assert_eq!(success(eval(&mut vm, source)), json!([1, 1, 0]));
    assert_eq!(success(eval(&mut vm, source)), json!([2, 1, 0]));
    // Globals changed by another request are seen by the kept chunk.
    success(eval(&mut vm, "runs = 40"));
    assert_eq!(success(eval(&mut vm, source)), json!([41, 1, 0]));
    assert_eq!(success(eval(&mut vm, source)), json!([42, 1, 0]));
    // Runtime errors repeat identically.
    let first = failure(eval(&mut vm, "local x = nil return x.y"));
    let second = failure(eval(&mut vm, "local x = nil return x.y"));
    assert_eq!(first.message, second.message);
    assert_eq!(first.context, second.context);
}

#[test]
fn a_chunk_that_rebinds_env_is_loaded_afresh_every_time() {
    let mut vm = vm();
    success(eval(&mut vm, "marker = 'global'"));
    let source = "local seen = marker _ENV = {marker = 'rebound'} return seen";
    assert_eq!(success(eval(&mut vm, source)), json!("global"));
    assert_eq!(success(eval(&mut vm, source)), json!("global"));
}

#[test]
fn an_infinite_loop_trips_the_instruction_budget() {
    assert_eq!(
        tripped(eval(&mut vm(), "while true do end")),
        "instructions"
    );
}

#[test]
fn the_instruction_count_overshoots_by_at_most_one_interval() {
    let error = retired(eval(
        &mut vm_with(Budgets {
            instruction_limit: 10_000,
            ..POLICY
        }),
        "while true do end",
    ));
    let observed: u64 = error.context[1]
        .strip_prefix("observed: ")
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!((10_001..=11_000).contains(&observed), "{observed}");
}

#[test]
fn a_tiny_instruction_limit_is_respected() {
    let mut vm = vm_with(Budgets {
        instruction_limit: 1,
        ..POLICY
    });
    assert_eq!(
        tripped(eval(&mut vm, "local a = 1 local b = 2 return a + b")),
        "instructions"
    );
}

// SPEC §15.1-g
#[test]
fn protected_calls_cannot_swallow_a_limit() {
    for source in [
        "return pcall(function() while true do end end)",
        "return xpcall(function() while true do end end, function() return 'caught' end)",
        "for i = 1, 1e9 do pcall(function() while true do end end) end return 'survived'",
        "local ok = pcall(pcall, function() while true do end end) return 'survived'",
        "return xpcall(function() while true do end end, function() while true do end end)",
        "local f = coroutine.wrap(function() while true do end end) return pcall(f)",
        "local co = coroutine.create(function() while true do end end) return coroutine.resume(co)",
        "local co = coroutine.create(function() while true do end end) coroutine.resume(co) return coroutine.close(co)",
    ] {
        assert_eq!(tripped(eval(&mut vm(), source)), "instructions", "{source}");
    }
}

#[test]
fn error_objects_with_looping_tostring_end_in_a_limit() {
    for source in [
        "error(setmetatable({}, {__tostring = function() while true do end end}))",
        "local ok, e = pcall(error, setmetatable({}, {__tostring = function() while true do end end})) return tostring(e)",
    ] {
        assert_eq!(tripped(eval(&mut vm(), source)), "instructions", "{source}");
    }
}

#[test]
fn catastrophic_patterns_trip_the_instruction_budget() {
    // DESIGN §15.4, §15.6: every matcher step is charged, so exponential
    // backtracking ends like a loop, even behind pcall and in every pattern
    // function (the gsub replacement loop and gmatch included).
    for source in [
        "return (('a'):rep(30) .. 'b'):find(('a*'):rep(30) .. 'c')",
        "return pcall(string.match, ('a'):rep(30), ('a*'):rep(30) .. 'c')",
        "return ('a'):rep(30):gsub(('a*'):rep(30) .. 'c', 'x')",
        "return ('a'):rep(30):gsub(('a*'):rep(30) .. 'c', function() end)",
        "for m in ('a'):rep(30):gmatch(('a*'):rep(30) .. 'c') do end",
    ] {
        assert_eq!(tripped(eval(&mut vm(), source)), "instructions", "{source}");
    }
}

#[test]
fn pattern_recursion_is_bounded_like_lua() {
    // MAXCCALLS: 200 nested matcher calls, then Lua's own error.
    let mut vm = vm();
    for source in [
        "local ok, e = pcall(string.match, ('a'):rep(300), ('a?'):rep(300)) return e",
        "local ok, e = pcall(string.find, ('a'):rep(5000), ('a*'):rep(500) .. 'b') return e",
    ] {
        assert_eq!(
            success(eval(&mut vm, source)),
            json!("pattern too complex"),
            "{source}"
        );
    }
}

#[test]
fn close_handlers_cannot_rescue_a_stopped_request() {
    for source in [
        "do local x <close> = setmetatable({}, {__close = function() while true do end end}) end",
        "local ok = pcall(function()
           local x <close> = setmetatable({}, {__close = function() return 'fine' end})
           while true do end
         end) return 'survived'",
        "local ok = pcall(function()
           local x <close> = setmetatable({}, {__close = function() error('replaced') end})
           while true do end
         end) return 'survived'",
    ] {
        assert_eq!(tripped(eval(&mut vm(), source)), "instructions", "{source}");
    }
}

// SPEC §15.1-d
#[test]
fn coroutines_cannot_hide_instructions_from_the_budget() {
    // Each coroutine runs fewer instructions than one hook interval; without
    // the per-coroutine charge this would run for ~10^10 instructions.
    let started = Instant::now();
    let verdict = eval(
        &mut vm(),
        "for i = 1, 1e7 do
           local co = coroutine.create(function() for j = 1, 300 do end end)
           coroutine.resume(co)
         end",
    );
    assert_eq!(tripped(verdict), "instructions");
    assert!(started.elapsed() < Duration::from_secs(5));
    let verdict = eval(
        &mut vm(),
        "for i = 1, 1e7 do coroutine.wrap(function() for j = 1, 300 do end end)() end",
    );
    assert_eq!(tripped(verdict), "instructions");
}

// SPEC §15.1-b
#[test]
fn memory_bombs_trip_the_memory_limit() {
    for source in [
        "return string.rep('x', 1e9)",
        // Within Lua's own bound (2^31 - 1 bytes; past it `rep` raises
        // Lua's 'resulting string too large', as stock Lua does).
        "return #string.rep('x', 2^29, ',')",
        "local s = 'x' while true do s = s .. s end",
        "local t = {} for i = 1, 1e9 do t[i] = i end",
        "local t = {} for i = 1, 1e9 do t[#t + 1] = tostring(i) end",
        "for i = 1, 100 do pcall(string.rep, 'x', 1e9) end return 'survived'",
        "local ok = pcall(function() local t = {} for i = 1, 1e9 do t[i] = {} end end) return 'survived'",
        "local ok = pcall(function()
           local c <close> = setmetatable({}, {__close = function() error('replaced') end})
           local t = {} for i = 1, 1e9 do t[i] = i end
         end) return 'survived'",
    ] {
        assert_eq!(
            tripped(eval(&mut vm_with(BIG), source)),
            "memory",
            "{source}"
        );
    }
    // A buffer fed by a metamethod: every 64 KiB piece is charged as it is
    // allocated (DESIGN §15.6), so the instruction budget may end it before
    // the memory limit does; either way a limit ends it.
    let fed = "return table.concat(setmetatable({}, {__index = function() return string.rep('y', 65536) end}), '', 1, 1e6)";
    let limit = tripped(eval(&mut vm_with(BIG), fed));
    assert!(limit == "memory" || limit == "instructions", "{limit}");
}

#[test]
fn native_loops_end_by_the_budget() {
    for source in [
        "table.move({}, 1, math.maxinteger, 2)",
        "table.move({}, 1, 1e12, 1, {})",
        "table.move(setmetatable({}, {__index = function() return 1 end}), 1, 1e12, 1, {})",
        "return table.concat({}, '', 1, 1e12)",
        "local t = setmetatable({}, {__len = function() return math.maxinteger - 1 end}) table.insert(t, 1, 'x')",
        "local t = setmetatable({}, {__len = function() return 2^40 end}) table.remove(t, 1)",
        "return select('#', table.unpack({}, 1, 2000000))",
    ] {
        let verdict = eval(&mut vm(), source);
        assert!(
            matches!(&verdict, Verdict::Retired(_) | Verdict::Failure(_)),
            "{source}: {verdict:?}"
        );
        if let Verdict::Retired(error) = verdict {
            assert!(
                error
                    .context
                    .iter()
                    .any(|c| c == "limit: instructions" || c == "limit: memory"),
                "{source}: {error:?}"
            );
        }
    }
}

#[test]
fn table_functions_keep_their_results() {
    let mut vm = vm();
    let value = success(eval(
        &mut vm,
        "local t = {1, 2, 3}
         table.insert(t, 1, 0) table.insert(t, 4) local r = table.remove(t, 2)
         local m = table.move({1, 2, 3}, 1, 3, 2)
         local p = setmetatable({}, {__index = function(_, i) return i * 10 end, __len = function() return 3 end})
         table.sort(t, function(a, b) return a > b end)
         return {t = t, r = r, m = m, c = table.concat(p, ','), u = {table.unpack(p)},
                 up = string.upper('ab'), sub = ('hello'):sub(2, 3), f = string.format('%d-%s', 4, 'x')}",
    ));
    assert_eq!(
        value,
        json!({"t": [4, 3, 2, 0], "r": 1, "m": [1, 1, 2, 3], "c": "10,20,30",
               "u": [10, 20, 30], "up": "AB", "sub": "el", "f": "4-x"})
    );
}

#[test]
fn deep_recursion_is_an_error_not_a_crash() {
    for source in [
        "local function f(n) return 1 + f(n + 1) end return f(1)",
        "local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end return t.x",
        "local function f() return pcall(f) end return f()",
        "local function f() return tostring(setmetatable({}, {__tostring = f})) end return f()",
        "local s = '' for i = 1, 300 do s = s .. '(' end return s",
    ] {
        let verdict = eval(&mut vm_with(BIG), source);
        assert!(
            !matches!(verdict, Verdict::Violation(_)),
            "{source}: {verdict:?}"
        );
    }
    let error = failure(eval(
        &mut vm_with(Budgets {
            memory_limit_bytes: 64 * 1024 * 1024,
            ..BIG
        }),
        "local function f(n) return 1 + f(n + 1) end return f(1)",
    ));
    assert!(error.message.contains("stack overflow"), "{error:?}");
}

// SPEC §15.1-c
#[test]
fn the_wall_deadline_stops_a_request() {
    let mut vm = vm_with(Budgets {
        wall_time_ms: 50,
        ..BIG
    });
    let started = Instant::now();
    assert_eq!(tripped(eval(&mut vm, "while true do end")), "wall_time");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn cancellation_is_observed_by_the_hook() {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut vm = quirl_lua_reference_worker::Vm::new(
        &quirl_lua_reference_worker::VmConfig {
            policy: BIG.policy(),
            grants: None,
            process_enabled: false,
        },
        Arc::clone(&cancel),
        None,
    )
    .unwrap();
    let flag = Arc::clone(&cancel);
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        flag.store(true, Ordering::Relaxed);
    });
    assert_eq!(tripped(eval(&mut vm, "while true do end")), "cancellation");
    setter.join().unwrap();
}

#[test]
fn a_stopped_vm_stays_stopped() {
    let mut vm = vm();
    tripped(eval(&mut vm, "while true do end"));
    assert_eq!(tripped(eval(&mut vm, "return 1")), "instructions");
}

#[test]
fn guest_errors_carry_a_label_at_the_reported_line() {
    let error = failure(eval(&mut vm(), "local x = 1\nlocal y = nil\nreturn y.z"));
    assert_eq!(error.code, ErrorCode::Lua);
    let label = &error.labels[0];
    let source = label.source.as_deref().unwrap();
    assert_eq!(
        &source[label.start as usize..label.end as usize],
        "return y.z"
    );
    let error = failure(eval(&mut vm(), "local x = = 1"));
    assert!(error.message.starts_with("Lua syntax error"), "{error:?}");
    assert_eq!(error.labels.len(), 1);
}

#[test]
fn huge_error_messages_are_bounded() {
    let mut vm = vm_with(Budgets {
        memory_limit_bytes: 64 * 1024 * 1024,
        ..BIG
    });
    let error = failure(eval(&mut vm, "error(string.rep('x', 4000000))"));
    assert!(error.text_bytes() <= 256 * 1024);
}

#[test]
fn a_memory_limit_below_the_sandbox_is_refused() {
    let result = quirl_lua_reference_worker::Vm::new(
        &quirl_lua_reference_worker::VmConfig {
            policy: Budgets {
                memory_limit_bytes: 1,
                ..POLICY
            }
            .policy(),
            grants: None,
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    );
    assert_eq!(result.err().map(|e| e.code), Some(ErrorCode::ResourceLimit));
}

#[test]
fn results_must_be_json_compatible() {
    let mut vm = vm();
    for source in [
        "return type",
        "return function() end",
        "return {f = type}",
        "return 0/0",
    ] {
        failure(eval(&mut vm, source));
    }
    assert_eq!(
        success(eval(&mut vm, "return {a = {1, 2.5}, b = 'x'}")),
        json!({"a": [1, 2.5], "b": "x"})
    );
}

#[test]
fn deeply_nested_source_is_a_syntax_error() {
    let source = format!("return {}1{}", "(".repeat(100_000), ")".repeat(100_000));
    let error = failure(eval(&mut vm_with(BIG), &source));
    assert_eq!(error.code, ErrorCode::Lua);
}

#[test]
fn crafted_positions_in_error_messages_are_handled() {
    let mut vm = vm();
    let error = failure(eval(&mut vm, "error('eval:007: crafted', 0)"));
    assert_eq!(error.message, "Lua runtime error: crafted");
    for message in [
        "eval:",
        "eval:é:",
        "é",
        "eval:99999999999999999999999: x",
        "\u{1b}[2J",
    ] {
        let error = failure(eval(&mut vm, &format!("error({message:?}, 0)")));
        assert_eq!(error.code, ErrorCode::Lua);
    }
}
