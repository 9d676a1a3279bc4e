//! The native paths of the loop audit end by the worker's own limits
//! (DESIGN §15.6-b, §15.6-d; `reference-worker/metered-lua/LOOPS.md`): each
//! program below did work inside one instruction or library call that no
//! charge saw, and ran until the parent's deadline killed the worker. Each
//! runs here as a whole command (`quirl-lua eval`, worker, lockdown and
//! parent included) with a 1,000,000-unit budget (10,000,000 where the
//! path needs a heap at the memory limit or a large chunk first) and a 3 s
//! deadline, and must end with the worker's own `resource_limit` answer
//! (`limit: instructions` or `limit: memory`, exit status 3) well before
//! the deadline: within 1.5 s, a generous bound for a debug build on a
//! shared machine (the CPU per unit is measured in BENCHMARKS.md).
//! A run that reaches the deadline ends with `limit: deadline` (or
//! `wall_time`) after 3 s, and a worker that dies (the host's error
//! objects past the address-space limit) with exit status 4.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The runs are timed: one at a time, so that they do not share the CPUs.
static TIMED: Mutex<()> = Mutex::new(());

struct Run {
    status: Option<i32>,
    limit: Option<String>,
    elapsed: Duration,
    output: String,
}

/// `quirl-lua --json eval SOURCE` with the given budget and a 3 s deadline.
fn eval(source: &str, instructions: u64, extra: &[&str]) -> Run {
    let cli = quirl_lua_testkit::bin_path("quirl-lua-cli", "quirl-lua");
    let _one = quirl_lua_testkit::serial::one_at_a_time(&TIMED);
    let started = Instant::now();
    let output = Command::new(cli)
        .args(["--instructions", &instructions.to_string()])
        .args(["--wall-time-ms", "3000", "--json"])
        .args(extra)
        .args(["eval", "--", source])
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let limit = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|value| {
            value["error"]["context"]
                .as_array()?
                .iter()
                .find_map(|c| c.as_str()?.strip_prefix("limit: ").map(str::to_owned))
        });
    Run {
        status: output.status.code(),
        limit,
        elapsed,
        output: format!("{text}{}", String::from_utf8_lossy(&output.stderr)),
    }
}

#[track_caller]
fn assert_own_limit(run: &Run, limits: &[&str], what: &str) {
    assert_eq!(run.status, Some(3), "{what}: {}", run.output);
    let limit = run.limit.as_deref().unwrap_or("none");
    assert!(
        limits.contains(&limit),
        "{what} ended by `{limit}`, not by {limits:?}: {}",
        run.output
    );
    assert!(
        run.elapsed < Duration::from_millis(1500),
        "{what} took {:?}",
        run.elapsed
    );
}

#[track_caller]
fn assert_ends_by_the_budget(source: &str, instructions: u64, extra: &[&str], what: &str) {
    let run = eval(source, instructions, extra);
    assert_own_limit(&run, &["instructions", "memory"], what);
}

const MILLION: u64 = 1_000_000;

// --- The examples (15.6-b) ------------------------------------------

#[test]
fn gsub_replacement_items_on_empty_matches_are_charged() {
    // DESIGN §15.6-b: `add_s` walks the replacement string's items for
    // every match; 25,000 `%0` of empty matches add nothing to allocate.
    assert_ends_by_the_budget(
        "local r = string.rep('%0', 50000) local s = string.rep('a', 1000)
         for i = 1, 1e9 do s:gsub('', r) end",
        MILLION,
        &[],
        "gsub with %0 items",
    );
}

#[test]
fn frontier_sets_are_charged_for_every_scan() {
    // DESIGN §15.6-b: `%f[set]` scans its set (three times) at every
    // position the matcher tries.
    assert_ends_by_the_budget(
        "local set = '%f[' .. string.rep('a', 100000) .. 'b]' local s = string.rep('x', 100000)
         for i = 1, 1e9 do s:find(set) end",
        MILLION,
        &[],
        "a frontier pattern with a long set",
    );
}

#[test]
fn errors_caught_deep_in_the_stack_are_charged_for_the_stack_they_walk() {
    // DESIGN §15.6-b: each caught error walks every frame to shrink the
    // stack (`luaD_shrinkstack`), 50,000 here.
    assert_ends_by_the_budget(
        "local function deep(n)
           if n == 0 then for i = 1, 1e9 do pcall(error, 'x') end else return 1 + deep(n - 1) end
         end
         deep(50000)",
        MILLION,
        &[],
        "errors caught at depth 50,000",
    );
}

#[test]
fn emergency_collections_at_the_memory_limit_are_charged_by_their_work() {
    // DESIGN §15.6-b: a heap kept 16 KiB under the memory limit; every
    // small table then refused by the limit ran an uncharged full
    // collection of the whole heap before its retry.
    assert_ends_by_the_budget(
        "local head = nil
         while collectgarbage('count') < 16 * 1024 - 16 do head = {head} end
         for j = 1, 1e9 do local s = {} end",
        10 * MILLION,
        &["--memory", "16MiB"],
        "allocation at the memory limit",
    );
}

// --- 15.6-d: memory outside the meter ---------------------------------------

/// A callback error per call, kept, each with a traceback through a
/// function whose global name is 100,000 bytes long.
const KEPT_CALLBACK_ERRORS: &str = "
local keep = {}
local name = string.rep('f', 100000)
_G[name] = function() local ok, e = pcall(quirl.config, 1) return e end
local f = _G[name]
for i = 1, 1e9 do keep[i] = f() end";

#[test]
fn kept_callback_errors_count_against_the_memory_limit() {
    // DESIGN §15.6-d: mlua keeps each Rust callback error, with its
    // traceback, on the Rust heap. Before, ~1,000 of them reached the
    // process's address-space limit and the worker aborted (exit 4,
    // "ended without answering"); now each counts against the memory
    // limit while it lives, and names in tracebacks are cut.
    let run = eval(KEPT_CALLBACK_ERRORS, 100 * MILLION, &["--memory", "8MiB"]);
    assert_own_limit(&run, &["memory"], "kept callback errors");
    // With the default budget they end by one limit or the other.
    assert_ends_by_the_budget(KEPT_CALLBACK_ERRORS, MILLION, &[], "kept callback errors");
}

// --- 15.6-a and 15.6-c: the examples end by the budget too ------------------

#[test]
fn the_determinism_and_overcharge_examples_end_by_the_budget() {
    // Their trip points and costs are checked in-process
    // (tests/budget_determinism.rs, tests/budgets.rs); here they end by the
    // budget as whole commands.
    for (what, source) in [
        (
            "a sliding-window set",
            "local s, w = {}, 1000
             for i = 1, 1e9 do s[i] = true s[i - w] = nil s['k' .. i] = i s['k' .. (i - w)] = nil end",
        ),
        (
            "lookups of long-string keys",
            "local base = string.rep('x', 300) local t = {} for i = 1, 200 do t[base .. i] = i end
             local n = 0 for j = 1, 1e9 do for i = 1, 200 do n = n + t[base .. i] end end",
        ),
        (
            "next over 17 large tables in turn",
            "local ts, ks = {}, {}
             for j = 1, 17 do local t = {} for i = 1, 2000 do t['k' .. i] = i end ts[j] = t end
             while true do for j = 1, 17 do ks[j] = next(ts[j], ks[j]) end end",
        ),
        (
            "collectgarbage('step') on a large heap",
            "local t = {} for i = 1, 100000 do t[i] = {} end
             for i = 1, 1e9 do collectgarbage('step') end",
        ),
    ] {
        assert_ends_by_the_budget(source, MILLION, &[], what);
    }
}

// --- Paths the loop inventory found (LOOPS.md) ------------------------------

#[test]
fn a_long_pattern_is_charged_for_its_search_of_special_characters() {
    // `nospecials` reads a pattern whole (`strpbrk`) before the matcher
    // gives up at its first item.
    assert_ends_by_the_budget(
        "local p = string.rep(string.rep('a', 1024), 1024) .. '.' local s = 'b'
         for i = 1, 1e9 do s:find(p) end",
        MILLION,
        &[],
        "a 1 MiB pattern with one special character at its end",
    );
}

#[test]
fn a_long_format_specification_is_not_read_past_its_limit() {
    // `getformat` read the whole run of flags and digits (`strspn`)
    // before refusing it as too long; now at most 32 bytes.
    assert_ends_by_the_budget(
        "local f = '%' .. string.rep(string.rep('1', 1024), 1024)
         for i = 1, 1e9 do pcall(string.format, f, 1) end",
        MILLION,
        &[],
        "a format with a 1 MiB width",
    );
}

#[test]
fn chunk_names_and_load_modes_are_charged_or_not_read_past_what_is_shown() {
    // With `lua.load`: every error in a chunk named by 8 MiB of text
    // searched the name for a newline (`luaO_chunkid`), and every `load`
    // searched its mode string and read its name (`checkmode`, `luaS_new`).
    let grant = ["--grant", "lua.load"];
    assert_ends_by_the_budget(
        "local f = load('error(\"x\")', string.rep(string.rep('x', 1024), 8192))
         for i = 1, 1e9 do pcall(f) end",
        MILLION,
        &grant,
        "errors in a chunk with an 8 MiB name",
    );
    assert_ends_by_the_budget(
        "local mode = string.rep(string.rep('b', 1024), 8192) .. 't'
         for i = 1, 1e9 do load('', nil, mode) end",
        MILLION,
        &grant,
        "load with an 8 MiB mode",
    );
    assert_ends_by_the_budget(
        "local name = string.rep(string.rep('x', 1024), 8192)
         for i = 1, 1e9 do load('', name) end",
        MILLION,
        &grant,
        "load with an 8 MiB chunk name",
    );
}

#[test]
fn require_is_charged_per_searcher_it_calls() {
    // With `lua.load`: `findloader` calls every function in
    // `package.searchers` from C, with no instruction dispatched.
    assert_ends_by_the_budget(
        "for i = 2, 50000 do package.searchers[i] = string.len end
         while true do pcall(require, 'x') end",
        MILLION,
        &["--grant", "lua.load"],
        "require through 50,000 C searchers",
    );
}

#[test]
fn errors_in_a_function_with_large_line_gaps_are_charged_for_the_line_table() {
    // With `lua.load`: a chunk whose statements are 130 lines apart has an
    // absolute line entry per statement, denser than `getbaseline`'s
    // estimate; every error message's line lookup walked them (`error` at
    // level 2 names the line of the chunk's loop). 3,000,000 units: the
    // chunk's 650 KB are compiled first.
    assert_ends_by_the_budget(
        "local f = load('local x = 0 ' .. string.rep('x = x + 1' .. string.rep('\\n', 130), 5000)
           .. ' for i = 1, 1e9 do pcall(error, \"x\", 2) end')
         f()",
        3 * MILLION,
        &["--grant", "lua.load"],
        "errors after 5,000 line gaps",
    );
}

#[test]
fn long_arguments_of_the_sandbox_s_own_functions_are_charged_before_they_are_read() {
    // `quirl.process.run` converts its argument to UTF-8 and checks it
    // character by character before its length is checked; `io.open` and
    // `io.popen` check their mode, and `os.getenv` its name, byte by byte.
    // Each read an 8 MiB string at every call, for a few units.
    const BIG: &str = "string.rep(string.rep('a', 65536), 128)";
    assert_ends_by_the_budget(
        &format!("local s = {BIG} while true do pcall(quirl.process.run, s) collectgarbage() end"),
        MILLION,
        &[],
        "process.run with an 8 MiB command",
    );
    assert_ends_by_the_budget(
        "local m = 'r' .. string.rep(string.rep('b', 65536), 128)
         while true do pcall(io.open, 'x', m) end",
        MILLION,
        &["--grant", "lua.io"],
        "io.open with an 8 MiB mode",
    );
    assert_ends_by_the_budget(
        &format!("local m = {BIG} while true do pcall(io.popen, 'x', m) end"),
        MILLION,
        &["--grant", "lua.io"],
        "io.popen with an 8 MiB mode",
    );
    assert_ends_by_the_budget(
        &format!("local n = {BIG} while true do os.getenv(n) end"),
        MILLION,
        &["--grant", "lua.os"],
        "os.getenv with an 8 MiB name",
    );
}
