//! Generated Lua programs against the instruction budget (DESIGN §15.6).
//!
//! [`program`] turns fuzzer bytes into a Lua program from a small grammar:
//! loops, library calls with adversarial arguments (huge counts, empty
//! strings, long formats, sparse tables), metamethods, to-be-closed
//! variables, protected calls and coroutines. [`run`] runs it in a fresh
//! sandbox VM with a small instruction budget and checks that it ends by the
//! worker's own limits — normal completion, an ordinary Lua error, or an
//! `instructions` / `memory` trip, never the wall-clock deadline — with the
//! thread CPU time it used at most [`CPU_NS_PER_UNIT_MAX`] nanoseconds per
//! budget unit (plus a fixed allowance for the VM's setup). Inputs that
//! start with [`CHURN_SELECTOR`] are table churn programs instead, run
//! twice: both runs must agree to the unit (DESIGN §15.6-a).
//!
//! Used by the `lua_programs` fuzz target (`fuzz/`), the worker's stable
//! replay test (`reference-worker/tests/generated_programs.rs`, proptest)
//! and the B1 rows of `quirl-lua-bench`.

use quirl_lua_protocol::records::{Operation, Policy, PolicySettings};
/// The worker binaries' allocation path, for a harness that runs VMs the same
/// way (the `lua_programs` fuzz target; see its safety rule).
pub use quirl_lua_reference_worker::declare_system_allocator;
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Instruction budget of every generated run.
pub const INSTRUCTION_LIMIT: u64 = 100_000;
/// Memory limit of every generated run.
pub const MEMORY_LIMIT: u64 = 8 * 1024 * 1024;
/// Wall-clock budget: far above what the instruction budget allows, so a
/// run that reaches it was not bounded by the budget.
pub const WALL_TIME_MS: u64 = 20_000;
/// Bound asserted on CPU time per budget unit, in nanoseconds. Generous on
/// purpose (sanitizers and coverage instrumentation slow the Rust side, a
/// shared machine adds noise); the measured worst case is in DESIGN §15.6.
pub const CPU_NS_PER_UNIT_MAX: u64 = 20_000;
/// Fixed CPU allowance per run (request setup, result conversion).
pub const CPU_NS_FIXED: u64 = 50_000_000;

/// A cursor over fuzzer bytes; reads past the end yield zeros.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        byte
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    fn pick<'s>(&mut self, items: &[&'s str]) -> &'s str {
        items.get(self.below(items.len())).copied().unwrap_or("nil")
    }

    fn exhausted(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// Values every program can use (defined by [`PROLOGUE`]).
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "7",
    "64",
    "1000",
    "2^31",
    "1e6",
    "1e9",
    "1e15",
    "math.maxinteger",
    "math.mininteger",
    "0.5",
    "-0.0",
    "0/0",
    "'10'",
    "DIGITS",
    "nil",
];
const STRINGS: &[&str] = &[
    "''",
    "'x'",
    "'abc'",
    "BIG",
    "BIG2",
    "DIGITS",
    "CONT",
    "LONGFMT",
    "'i4'",
    "'!8 i16 d s z'",
    "'%s'",
    "'%99d'",
    "'%q'",
    "'%p'",
    "'\\0\\0x'",
    "'\\u{10FFFF}'",
    "tostring(SPARSE)",
    "BIGZ",
    "LONGSET",
];
const TABLES: &[&str] = &[
    "{}",
    "{1, 2, 3}",
    "DENSE",
    "SPARSE",
    "HASHY",
    "META",
    "LIAR",
    "{BIG, BIG2, 'x'}",
];
const FUNCTIONS: &[&str] = &[
    "function(a, b) return a < b end",
    "function(a, b) return true end",
    "function() while true do end end",
    "function(...) return ... end",
    "error",
    "pcall",
    "print",
];
const FORMATS: &[&str] = &[
    "'%s'", "'%d'", "'%5.2f'", "'%q'", "'%x'", "'%c'", "'%p'", "'%a'", "LONGFMT", "BIG",
];

/// Built before the generated statements (charged like any guest code).
const PROLOGUE: &str = r#"
local BLOCK = string.rep('x', 1024)
local BIG = string.rep(BLOCK, 64)
local BIG2 = BIG:sub(1, -2) .. 'y'
local DIGITS = string.rep('1', 8192)
local CONT = string.rep('\x80', 8192)
local LONGFMT = string.rep('i', 4096)
local BIGZ = BIG .. 'z'
local LONGSET = '[' .. string.rep('b', 4096) .. 'x]'
local SELFCALL = setmetatable({}, {}) getmetatable(SELFCALL).__call = SELFCALL
local DENSE = {} for i = 1, 4096 do DENSE[i] = i end
local SPARSE = {} for i = 1, 4096 do SPARSE[i] = i end for i = 1, 4095 do SPARSE[i] = nil end
local HASHY = {} for i = 1, 2048 do HASHY['k' .. i] = i end for i = 1, 2047 do HASHY['k' .. i] = nil end
local META = setmetatable({}, {
  __index = function(t, k) return k end,
  __len = function() return 1e6 end,
  __lt = function(a, b) return true end,
  __le = function(a, b) return false end,
  __eq = function() return true end,
  __concat = function(a, b) return 'c' end,
  __call = function(self, ...) return ... end,
  __tostring = function() return 'meta' end,
  __close = function() end,
})
local LIAR = setmetatable({}, {__len = function() return math.maxinteger end, __index = function() return 1 end})
local CHAIN = {} for i = 1, 200 do CHAIN = setmetatable({}, {__index = CHAIN, __newindex = CHAIN}) end
local sink = {}
"#;

/// Build a Lua program from `data`.
pub fn program(data: &[u8]) -> String {
    let mut bytes = Bytes { data, pos: 0 };
    let mut out = String::from(PROLOGUE);
    let mut count = 0;
    while count < 8 && !(count > 0 && bytes.exhausted()) {
        statement(&mut bytes, &mut out, 0);
        out.push('\n');
        count += 1;
    }
    out.push_str("return #sink\n");
    out
}

fn value(bytes: &mut Bytes<'_>) -> String {
    match bytes.below(5) {
        0 => bytes.pick(NUMBERS).to_owned(),
        1 | 2 => bytes.pick(STRINGS).to_owned(),
        3 => bytes.pick(TABLES).to_owned(),
        _ => bytes.pick(FUNCTIONS).to_owned(),
    }
}

fn call(bytes: &mut Bytes<'_>) -> String {
    let n = bytes.pick(NUMBERS);
    let m = bytes.pick(NUMBERS);
    let s = bytes.pick(STRINGS);
    let s2 = bytes.pick(STRINGS);
    let t = bytes.pick(TABLES);
    let f = bytes.pick(FUNCTIONS);
    let v = value(bytes);
    match bytes.below(64) {
        0 => format!("string.rep({s}, {n}, {s2})"),
        1 => format!("string.rep({s}, {n})"),
        2 => format!("string.pack({s}, {n}, {n})"),
        3 => format!("string.packsize({s})"),
        4 => format!("string.unpack({s}, {s2}, {n})"),
        5 => format!("string.format({}, {v})", bytes.pick(FORMATS)),
        6 => format!("table.concat({t}, {s}, {n}, {m})"),
        7 => format!("table.sort({t}, {f})"),
        8 => format!("table.move({t}, {n}, {m}, {n}, {t})"),
        9 => format!("table.insert({t}, {n}, {v})"),
        10 => format!("table.remove({t}, {n})"),
        11 => format!("table.unpack({t}, {n}, {m})"),
        12 => format!("utf8.char({n}, {m})"),
        13 => format!("utf8.len({s}, {n}, {m})"),
        14 => format!("utf8.codepoint({s}, {n}, {m})"),
        15 => format!("utf8.offset({s}, {n}, {m})"),
        16 => format!(
            "(function() local n = 0 for p, c in utf8.codes({s}) do n = n + 1 end return n end)()"
        ),
        17 => format!("select(2, pcall(utf8.codes(''), {s}, {n}))"),
        18 => format!("tostring({v})"),
        19 => format!("tonumber({s})"),
        20 => format!("tonumber({s}, {n})"),
        21 => format!("string.byte({s}, {n}, {m})"),
        22 => format!("string.sub({s}, {n}, {m})"),
        23 => format!("string.upper({s})"),
        24 => format!("string.find({s}, {s2}, {n}, true)"),
        25 => format!("next({t})"),
        26 => {
            format!("(function() local n = 0 for k in pairs({t}) do n = n + 1 end return n end)()")
        }
        27 => format!(
            "(function() local n = 0 for i in ipairs({t}) do n = n + 1 if n > 100 then break end end return n end)()"
        ),
        28 => format!("#{t}"),
        29 => format!("({s} .. {s2})"),
        30 => format!("({s} < {s2})"),
        31 => format!("({s} == {s2})"),
        32 => format!("({s} + 0)"),
        33 => format!("rawlen({t})"),
        34 => format!("select('#', {v}, {v})"),
        35 => format!("string.reverse({s})"),
        36 => format!("{t}[{s}]"),
        37 => format!("math.floor({n})"),
        38 => format!("string.format('%s %s', {s}, {t})"),
        // The paths of BENCHMARKS.md B3: chains of __index/__newindex
        // tables, error levels, unterminated z strings, `...` taken whole,
        // keys added and removed next to a large array part.
        39 => format!("CHAIN[{s}]"),
        40 => format!("(function() CHAIN[{s}] = {v} end)()"),
        41 => format!("select(2, pcall(error, {s}, {n}))"),
        42 => format!("select(2, pcall(string.unpack, 'z', {s}, {n}))"),
        43 => format!("(function(...) return select('#', ...) end)(table.unpack({t}, 1, {n}))"),
        44 => format!("(function() {t}[#sink + 0.5] = true {t}[#sink + 0.5] = nil end)()"),
        // The paths of the VM issue's audit (DESIGN §15.6): comparisons of
        // strings of unequal lengths, a `__call` that leads back to itself,
        // set classes scanned per step, number keys that share Lua's own
        // hash (floats equal in their top 31 mantissa bits, multiples of an
        // odd modulus).
        45 => format!("({s} < BIGZ) or (BIGZ <= {s2})"),
        46 => "select(2, pcall(SELFCALL))".to_owned(),
        47 => format!("string.find({s}, LONGSET .. '+', {n})"),
        48 => format!("select(2, pcall(string.gsub, {s}, '^' .. LONGSET .. '*', {s2}))"),
        49 => format!(
            "select(2, pcall(function() local t = {{}} for i = 1, {n} do t[1 + i * 2^-45] = i end return t[1 + 2^-45] end))"
        ),
        50 => format!(
            "select(2, pcall(function() local t = {{}} for i = 1, {n} do t[i * 1048575] = i end return t[1048575] end))"
        ),
        // Found by Lua's own test suite (2026-12-05): a back-reference to a
        // position capture, and `%p` of strings (a keyed permutation).
        51 => format!("select(2, pcall(string.find, {s}, '(.-)()%2', {n}))"),
        52 => format!("string.format('%p %p', {s}, {s2} .. {s})"),
        // The paths of the loop audit (LOOPS.md): `gsub` replacement items
        // on empty matches, frontier sets, a pattern's search for special
        // characters, format specifications, caught errors deep in the
        // stack, collections the program asks for, ephemeron chains,
        // long-string keys, tables walked in turn, Rust callback errors.
        53 => format!("select(2, pcall(string.gsub, {s}, '', string.rep('%0', {n} % 4096)))"),
        54 => format!("string.find({s}, '%f[' .. LONGSET .. ']', {n})"),
        55 => format!("string.find({s}, {s2} .. '.')"),
        56 => format!("select(2, pcall(string.format, '%' .. DIGITS, {v}))"),
        57 => "collectgarbage('step')".to_owned(),
        58 => "collectgarbage()".to_owned(),
        59 => format!(
            "(function() local E = setmetatable({{}}, {{__mode = 'k'}}) local p = {{}} local r = p for i = 1, {n} % 3000 do local q = {{}} E[p] = q p = q end collectgarbage() return r end)()"
        ),
        60 => format!(
            "(function() local t = {{}} for i = 1, {n} % 5000 do t[BIG .. i] = i end return t[BIG .. 1] end)()"
        ),
        61 => format!(
            "(function() local a, b = {{}}, {{}} for i = 1, 300 do a[i .. 'k'] = i b[i .. 'k'] = i end local ka, kb for i = 1, {n} % 2000 do ka = next(a, ka) kb = next(b, kb) end return ka end)()"
        ),
        62 => format!("select(2, pcall(quirl.config, {v}))"),
        _ => format!("coroutine.status(coroutine.create({f}))"),
    }
}

fn statement(bytes: &mut Bytes<'_>, out: &mut String, depth: usize) {
    if depth >= 4 {
        out.push_str(&format!("sink[#sink % 8 + 1] = {}", call(bytes)));
        return;
    }
    let d = depth + 1;
    match bytes.below(18) {
        0..=4 => out.push_str(&format!("sink[#sink % 8 + 1] = {}", call(bytes))),
        5 => {
            let limit = bytes.pick(&["3", "100", "1e4", "1e9"]);
            out.push_str(&format!("for i = 1, {limit} do "));
            statement(bytes, out, d);
            out.push_str(" end");
        }
        6 => {
            out.push_str("while true do ");
            statement(bytes, out, d);
            out.push_str(" end");
        }
        7 => {
            out.push_str("pcall(function() ");
            statement(bytes, out, d);
            out.push_str(" end)");
        }
        8 => {
            out.push_str("xpcall(function() ");
            statement(bytes, out, d);
            out.push_str(" end, function(e) ");
            statement(bytes, out, d);
            out.push_str(" return e end)");
        }
        9 => {
            out.push_str("do local c <close> = setmetatable({}, {__close = function(o, e) ");
            statement(bytes, out, d);
            out.push_str(" end}) ");
            statement(bytes, out, d);
            out.push_str(" end");
        }
        10 => {
            out.push_str("do local co = coroutine.wrap(function() ");
            statement(bytes, out, d);
            out.push_str(" coroutine.yield() ");
            statement(bytes, out, d);
            out.push_str(" end) pcall(co) pcall(co) end");
        }
        11 => {
            out.push_str("do local co = coroutine.create(function() local c <close> = setmetatable({}, {__close = function() ");
            statement(bytes, out, d);
            out.push_str(" end}) coroutine.yield() ");
            statement(bytes, out, d);
            out.push_str(" end) coroutine.resume(co) ");
            if bytes.byte() & 1 == 0 {
                out.push_str("coroutine.close(co)");
            } else {
                out.push_str("coroutine.resume(co)");
            }
            out.push_str(" end");
        }
        12 => {
            let field = bytes.pick(&["__index", "__len", "__lt", "__eq", "__concat", "__tostring"]);
            out.push_str(&format!(
                "do local o = setmetatable({{}}, {{{field} = function(a, b) "
            ));
            statement(bytes, out, d);
            out.push_str(" return 1 end}) pcall(function() sink[1] = o[1] sink[2] = #o sink[3] = o < o sink[4] = o == setmetatable({}, getmetatable(o)) sink[5] = o .. 'x' sink[6] = tostring(o) end) end");
        }
        13 => {
            out.push_str("error(setmetatable({}, {__tostring = function() ");
            statement(bytes, out, d);
            out.push_str(" return 'e' end}))");
        }
        14 => {
            out.push_str("if sink[1] then ");
            statement(bytes, out, d);
            out.push_str(" else ");
            statement(bytes, out, d);
            out.push_str(" end");
        }
        15 => {
            // A long `elseif` chain: the compiler's work on it is charged
            // (DESIGN §15.6).
            let n = bytes.pick(NUMBERS);
            out.push_str(&format!("do local x = {n} if x == 0 then x = 1"));
            for branch in 1..2000 {
                out.push_str(&format!(" elseif x == {branch} then x = {branch}"));
            }
            out.push_str(" end sink[1] = x end");
        }
        16 => {
            // At the bottom of a deep stack: error levels and tracebacks
            // walk every frame (BENCHMARKS.md B3), and every caught error
            // walks it again to shrink the stack (LOOPS.md, `stackinuse`).
            out.push_str(
                "sink[#sink % 8 + 1] = (function() local function deep(k) if k == 0 then ",
            );
            statement(bytes, out, d);
            out.push_str(" return 0 end return 1 + deep(k - 1) end return deep(5000) end)()");
        }
        _ => {
            let t = bytes.pick(TABLES);
            out.push_str(&format!("for k, v in pairs({t}) do "));
            statement(bytes, out, d);
            out.push_str(" end");
        }
    }
}

/// How a generated run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It returned.
    Completed,
    /// It raised an ordinary Lua error.
    Failed,
    /// It tripped the named limit (`instructions`, `memory`, ...).
    Tripped(String),
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub ending: Ending,
    /// Thread CPU time used by the request, nanoseconds.
    pub cpu_ns: u64,
}

fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Run `source` in a fresh VM with the generated-run budget.
pub fn run_source(source: &str) -> Outcome {
    let policy = match Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: MEMORY_LIMIT,
        instruction_limit: INSTRUCTION_LIMIT,
        wall_time_ms: WALL_TIME_MS,
    }) {
        Ok(policy) => policy,
        Err(error) => panic!("the generated-run policy is out of range: {error:?}"),
    };
    let vm = Vm::new(
        &VmConfig {
            policy,
            grants: None,
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    );
    let mut vm = match vm {
        Ok(vm) => vm,
        Err(error) => panic!("the sandbox VM could not be built: {error:?}"),
    };
    let started = thread_cpu_ns();
    let verdict = vm.handle(Operation::Eval {
        source: source.to_owned(),
    });
    let cpu_ns = thread_cpu_ns().saturating_sub(started);
    let ending = match verdict {
        Verdict::Success(_) => Ending::Completed,
        Verdict::Failure(_) => Ending::Failed,
        Verdict::Retired(error) => Ending::Tripped(
            error
                .context
                .iter()
                .find_map(|c| c.strip_prefix("limit: ").map(str::to_owned))
                .unwrap_or_else(|| format!("unnamed: {error:?}")),
        ),
        Verdict::Violation(reason) => {
            panic!("a Lua program produced a protocol violation: {reason}")
        }
    };
    Outcome { ending, cpu_ns }
}

/// What a run measured, for the budget determinism test: how it ended,
/// what it returned, the units charged and the bytes held at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    /// How it ended (a limit, an error or completion).
    pub ending: Ending,
    /// The result (JSON) or the error message.
    pub result: String,
    /// Units charged in the request's window (at the stop, if any).
    pub units: u64,
    /// Bytes the VM held at the end.
    pub memory: u64,
}

/// Run `source` in a fresh VM with the given budgets and report what
/// [`Measured`] holds.
pub fn run_measured(source: &str, instruction_limit: u64, memory_limit: u64) -> Measured {
    let policy = match Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: memory_limit,
        instruction_limit,
        wall_time_ms: WALL_TIME_MS,
    }) {
        Ok(policy) => policy,
        Err(error) => panic!("the policy is out of range: {error:?}"),
    };
    let vm = Vm::new(
        &VmConfig {
            policy,
            grants: None,
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    );
    let mut vm = match vm {
        Ok(vm) => vm,
        Err(error) => panic!("the sandbox VM could not be built: {error:?}"),
    };
    let verdict = vm.handle(Operation::Eval {
        source: source.to_owned(),
    });
    let units = vm.meter().used_units();
    let memory = vm.used_memory();
    let (ending, result) = match verdict {
        Verdict::Success(value) => (Ending::Completed, value.to_string()),
        Verdict::Failure(error) => (Ending::Failed, error.message.clone()),
        Verdict::Retired(error) => (
            Ending::Tripped(
                error
                    .context
                    .iter()
                    .find_map(|c| c.strip_prefix("limit: ").map(str::to_owned))
                    .unwrap_or_else(|| format!("unnamed: {error:?}")),
            ),
            error.context.join("; "),
        ),
        Verdict::Violation(reason) => {
            panic!("a Lua program produced a protocol violation: {reason}")
        }
    };
    Measured {
        ending,
        result,
        units,
        memory,
    }
}

/// Key kinds of the table churn programs ([`churn_program`]): `$` is the
/// loop's counter.
const CHURN_KEYS: &[&str] = &[
    "$",
    "$ * 7919",
    "-$",
    "$ * 2^40",
    "$ + 0.5",
    "'k' .. $",
    "LONG .. $",
    "TKEYS[$ % 64 + 1]",
    "($ % 2 == 0)",
];
const CHURN_TABLES: &[&str] = &["A", "B", "WK", "WV"];
const CHURN_COUNTS: &[&str] = &["50", "500", "3000", "20000"];
const CHURN_WINDOWS: &[&str] = &["1", "16", "100", "1000"];

/// Built before a churn program's statements.
const CHURN_PROLOGUE: &str = r#"
local LONG = string.rep('x', 300)
local TKEYS = {} for i = 1, 64 do TKEYS[i] = {} end
local A, B = {}, {}
local WK = setmetatable({}, {__mode = 'k'})
local WV = setmetatable({}, {__mode = 'v'})
local ARR = {}
local acc = 0
local function count(t) local c = 0 for _ in pairs(t) do c = c + 1 end return c end
"#;

/// A table churn program from `data`, and the instruction limit to run it
/// with: keys of every kind (integers, floats, strings, long strings,
/// tables, booleans) added and removed in sliding windows, looked up and
/// counted, weak tables and ephemeron chains across collections, next
/// over several tables in turn, collector steps and memory counts. Nothing
/// the program computes depends on the order of a traversal, so the same
/// program must end the same way, with the same result, the same units
/// and the same bytes held, in every run (DESIGN §15.6-a), whatever the
/// process's hash secret and the state's string seed.
pub fn churn_program(data: &[u8]) -> (String, u64) {
    let mut bytes = Bytes { data, pos: 0 };
    let limit = [20_000, 60_000, 150_000, 400_000][bytes.below(4)];
    let mut out = String::from(CHURN_PROLOGUE);
    let mut count = 0;
    while count < 6 && !(count > 0 && bytes.exhausted()) {
        churn_statement(&mut bytes, &mut out);
        out.push('\n');
        count += 1;
    }
    out.push_str("return acc + #ARR + count(A) + count(B)\n");
    (out, limit)
}

fn churn_statement(bytes: &mut Bytes<'_>, out: &mut String) {
    let t = bytes.pick(CHURN_TABLES);
    let n = bytes.pick(CHURN_COUNTS);
    let w = bytes.pick(CHURN_WINDOWS);
    let key = bytes.pick(CHURN_KEYS);
    // the key added at step `i`, and the one `w` steps older, removed
    let k = key.replace('$', "i");
    let kw = key.replace('$', &format!("(i - {w})"));
    let statement = match bytes.below(14) {
        0..=2 => format!("for i = 1, {n} do {t}[{k}] = i {t}[{kw}] = nil end"),
        3 => format!("for i = 1, {n} do acc = acc + ({t}[{k}] and 1 or 0) end"),
        4 => format!("acc = acc + count({t})"),
        5 => format!(
            "do local k1, k2, k3 for i = 1, {n} do k1 = next(A, k1) k2 = next(B, k2) k3 = next({t}, k3) if k1 == nil then acc = acc + i break end end end"
        ),
        6 => format!(
            "do local E = setmetatable({{}}, {{__mode = 'k'}}) local prev = {{}} local keep = prev for i = 1, {n} do local nx = {{}} E[prev] = nx prev = nx end collectgarbage() acc = acc + count(E) keep = nil collectgarbage() acc = acc + count(E) end"
        ),
        7 => "collectgarbage()".to_owned(),
        8 => "collectgarbage('step')".to_owned(),
        9 => "acc = acc + math.floor(collectgarbage('count'))".to_owned(),
        10 => format!(
            "for i = 1, {n} do ARR[#ARR + 1] = {k} if #ARR > {w} then table.remove(ARR, 1) end end"
        ),
        11 => format!("for i = 1, {n} do local ok = pcall(error, {{}}) end"),
        12 => format!(
            "for i = 1, {n} do local s = LONG .. (i % {w}) acc = acc + ({t}[s] and 1 or 0) {t}[s] = true end"
        ),
        _ => format!(
            "do local t = {{}} for i = 1, {n} do t[{k}] = tostring(i) end acc = acc + #tostring(t) + #t end"
        ),
    };
    out.push_str(&statement);
}

/// First byte of a fuzz input that makes it a table churn program
/// ([`churn_program`], run twice by [`run`]) instead of a [`program`].
pub const CHURN_SELECTOR: u8 = 0xFF;

/// The fuzz target: generate, run, check. An input starting with
/// [`CHURN_SELECTOR`] is a table churn program from the bytes after it, run
/// twice in fresh VMs (each with its own string seed, heap addresses and
/// collector history); both runs must end the same way with the same
/// result, units and bytes held (DESIGN §15.6-a), each within the CPU
/// bound. Any other input is a [`program`], checked by [`check`].
pub fn run(data: &[u8]) {
    if let Some((&CHURN_SELECTOR, rest)) = data.split_first() {
        let (source, limit) = churn_program(rest);
        let first = run_churn(&source, limit);
        let second = run_churn(&source, limit);
        assert_eq!(
            first, second,
            "the same churn program ended differently in two VMs:\n{source}"
        );
        return;
    }
    let source = program(data);
    let outcome = run_source(&source);
    check(&source, &outcome);
}

/// One run of a churn program at `limit` units and [`MEMORY_LIMIT`]: it
/// ends by the worker's own limits within the CPU bound for `limit`.
fn run_churn(source: &str, limit: u64) -> Measured {
    let started = thread_cpu_ns();
    let measured = run_measured(source, limit, MEMORY_LIMIT);
    let cpu_ns = thread_cpu_ns().saturating_sub(started);
    if let Ending::Tripped(tripped) = &measured.ending {
        assert!(
            tripped == "instructions" || tripped == "memory",
            "run ended by {tripped}, not by the budget:\n{source}"
        );
    }
    let bound = CPU_NS_PER_UNIT_MAX
        .saturating_mul(limit)
        .saturating_add(CPU_NS_FIXED);
    assert!(
        cpu_ns <= bound,
        "run used {cpu_ns} ns of CPU, bound {bound} ns:\n{source}"
    );
    measured
}

/// Panic unless `outcome` is an ending by the worker's own limits within
/// the CPU bound.
pub fn check(source: &str, outcome: &Outcome) {
    if let Ending::Tripped(limit) = &outcome.ending {
        assert!(
            limit == "instructions" || limit == "memory",
            "run ended by {limit}, not by the budget:\n{source}"
        );
    }
    let bound = CPU_NS_PER_UNIT_MAX
        .saturating_mul(INSTRUCTION_LIMIT)
        .saturating_add(CPU_NS_FIXED);
    assert!(
        outcome.cpu_ns <= bound,
        "run used {} ns of CPU, bound {bound} ns:\n{source}",
        outcome.cpu_ns
    );
}
