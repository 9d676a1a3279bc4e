//! The worker capability `lua.load` (SPEC §7.1, DESIGN §15.3 "The `lua.load`
//! capability"): Lua's own `load` in text mode and `require` over
//! `package.preload` and `package.loaded`, compared with stock Lua 5.4.9;
//! programs shaped like the libraries that need them; the budget and memory
//! ends of compiling guest text; and the default globals without the grant.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use quirl_lua_reference_worker::sandbox::{
    GLOBALS, LUA_LOAD_GLOBALS, LUA_LOAD_GRANT, PACKAGE_MEMBERS,
};
use quirl_lua_reference_worker::{Vm, VmConfig};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn vm_granting(budgets: Budgets, grants: Option<Vec<&str>>) -> Vm {
    Vm::new(
        &VmConfig {
            policy: budgets.policy(),
            grants: grants.map(|grants| grants.into_iter().map(str::to_owned).collect()),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

/// A VM with `lua.load` granted (and nothing else).
fn loading_vm_with(budgets: Budgets) -> Vm {
    vm_granting(budgets, Some(vec![LUA_LOAD_GRANT]))
}

fn loading_vm() -> Vm {
    loading_vm_with(POLICY)
}

/// Every result: how many, and each one's type and (for plain values) text.
const SHOW: &str = r##"local function show(...)
  local out = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    local t = type(v)
    if t == "table" or t == "function" or t == "thread" or t == "userdata" then
      out[i] = t
    else
      out[i] = t .. ":" .. tostring(v)
    end
  end
  return select("#", ...) .. " [" .. table.concat(out, ", ") .. "]"
end
"##;

/// `load` in use, each an expression list (`...` of `show`).
const LOADS: &[&str] = &[
    // string chunks, results and varargs
    "load('return 1 + 2')()",
    "load('return ...')(1, nil, 3)",
    "load('')()",
    "load('return')",
    "load(42)",
    // syntax errors: nil and Lua's message, with the chunk name Lua writes
    "load('x = ')",
    "load('return 1 +', 'expr')",
    "load('return 1 +', '=expr')",
    "load('return 1 +', '@expr.lua')",
    "load('local a = 1\\nlocal b = = 2')",
    "load(('x'):rep(100) .. ' = = 1')",
    "load('return \"unfinished')",
    // long names are cut as Lua cuts them (LUA_IDSIZE)
    "load('x = = 1', '=' .. ('n'):rep(80))",
    "load('x = = 1', '@' .. ('d/'):rep(40) .. 'f.lua')",
    "load('x = = 1', ('s'):rep(80))",
    "load('\\n\\nx = = 1', 'first\\nsecond')",
    "load('goto nowhere')",
    "load('break')",
    "load('local x <const> = 1; x = 2')",
    "load('\\27Lua', nil, 't')",
    // run-time errors carry the chunk name and line
    "pcall(load('error(\"boom\")', '=mine'))",
    "pcall(load('\\n\\nerror(\"third\")', '@lib.lua'))",
    "pcall(load('local t = nil; return t.x', 'idx'))",
    "pcall(load('error(\"boom\")'))",
    "pcall(load('error(\"deep\", 2)', '=inner'))",
    // reader functions
    "load(coroutine.wrap(function() coroutine.yield('return ') coroutine.yield('4') coroutine.yield('2') end))()",
    "load((function() local parts, i = {'return ', '1', ' + 41'}, 0 return function() i = i + 1 return parts[i] end end)())()",
    "load(function() return nil end)",
    "load(function() return '' end)",
    "load(function() return {} end)",
    "load(function() error('reader failed') end)",
    "load((function() local n = 0 return function() n = n + 1 if n == 1 then return 'return +' end end end)())",
    "load(function() return nil end, 'named')",
    "pcall(load((function() local done return function() if not done then done = true return 'error(\"r\")' end end end)()))",
    // env
    "load('return x', 'c', 't', {x = 5})()",
    "load('x = 7; return x', 'c', 't', {})()",
    "(function() local e = {} load('y = 1', 'c', 't', e)() return e.y, y end)()",
    "pcall(load('return x', 'c', 't', nil))",
    "pcall(load('return x', 'c', 't', 3))",
    "load('return _ENV', 'c', 't', 'env')()",
    "load('local _ENV = {z = 9} return z')()",
    "load('return x', nil, nil, {x = 'default mode'})()",
    // mode
    "load('return 1', 'c', 'b')",
    "load('return 1', 'c', 'x')",
    "load('return 1', 'c', '')",
    "load('return 1', 'c', 't')()",
    "load('return 1', 'c', 'bt')()",
    // upvalues of loaded functions
    "(function() local f = load('local a = ... return function() a = a + 1 return a end') local g = f(10) g() return g() end)()",
    "(function() local mk = load('local n = 0 return function() n = n + 1 return n end, function() return n end') local inc, get = mk() inc() inc() return get() end)()",
    "(function() load('shared_global = 11')() return shared_global end)()",
    "(function() local f = load('return function() return _ENV end') return f()() == _G end)()",
    // argument errors are Lua's own
    "pcall(load)",
    "pcall(load, nil)",
    "pcall(load, {})",
    "pcall(load, 'x', {})",
    "pcall(load, 'x', 'c', {})",
    // require over package.preload and package.loaded
    "(function() package.preload.m = function(...) return {args = select('#', ...), name = (...)} end local m, data = require('m') return m.args, m.name, data, require('m') == m, package.loaded.m == m end)()",
    "(function() package.preload.n = function() end return require('n'), package.loaded.n end)()",
    "(function() package.preload.f = function() return false end return require('f'), package.loaded.f end)()",
    "(function() package.loaded.ready = 5 return require('ready') end)()",
    "pcall(require, 'missing')",
    "pcall(require)",
    "pcall(require, {})",
    "pcall(require, 1)",
    "(function() package.preload.bad = function() error('in module') end return pcall(require, 'bad') end)()",
    "(function() package.preload.src = load('local name = ... return {name = name}', '@src.lua') return require('src').name end)()",
    "(function() package.preload.a = function() return require('b') .. '+a' end package.preload.b = function() return 'b' end return require('a') end)()",
    "(function() package.searchers[2] = function(name) return function() return 'found ' .. name end, 'data' end return require('custom') end)()",
    "(function() package.searchers = nil return pcall(require, 'zz') end)()",
    "type(package.searchers[1])",
];

/// Stock Lua 5.4.9 with its package library cut to what the sandbox keeps
/// (only the preload searcher), so that `require`'s messages compare.
const STOCK_PREFIX: &str = "package.searchers = {package.searchers[1]}\n";

fn reference(source: &str) -> String {
    quirl_lua_testkit::stock::run(&format!("{STOCK_PREFIX}{source}"), "=eval")
        .unwrap_or_else(|e| panic!("the reference runs {source}: {e}"))
}

#[test]
fn load_and_require_behave_as_in_stock_lua() {
    let mut mismatches = Vec::new();
    for call in LOADS {
        // A fresh state per call, as the reference's: some calls change
        // `package` or globals.
        let mut vm = loading_vm();
        // A fresh line per call: the prefix shifts no line numbers of the
        // loaded chunks (they have their own names).
        let source = format!("{SHOW}return show({call})");
        let expected = reference(&source);
        let actual = success(eval(&mut vm, &format!("{STOCK_PREFIX}{source}")));
        if actual != json!(expected) {
            mismatches.push(format!(
                "{call}\n  lua:     {expected}\n  sandbox: {actual}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn require_names_only_the_preload_table_when_a_module_is_missing() {
    let mut vm = loading_vm();
    let message = success(eval(
        &mut vm,
        "local ok, message = pcall(require, 'json') return message",
    ));
    assert_eq!(
        message,
        json!("module 'json' not found:\n\tno field package.preload['json']")
    );
    let error = failure(eval(&mut vm, "require('json')"));
    assert_eq!(
        error.message,
        "Lua runtime error: module 'json' not found:\n\tno field package.preload['json']"
    );
}

#[test]
fn the_grant_adds_exactly_load_require_and_a_pruned_package() {
    let mut vm = loading_vm();
    let globals = success(eval(
        &mut vm,
        "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t",
    ));
    let mut expected: Vec<&str> = GLOBALS.iter().chain(LUA_LOAD_GLOBALS).copied().collect();
    expected.sort_unstable();
    assert_eq!(globals, json!(expected));
    let package = success(eval(
        &mut vm,
        "local t = {} for k in pairs(package) do t[#t + 1] = k end table.sort(t) \
         return {members = t, searchers = #package.searchers, loadlib = package.loadlib == nil, \
                 dump = string.dump == nil, dofile = dofile == nil, loadfile = loadfile == nil}",
    ));
    assert_eq!(
        package,
        json!({"members": PACKAGE_MEMBERS, "searchers": 1, "loadlib": true,
               "dump": true, "dofile": true, "loadfile": true})
    );
}

/// Stock Lua's `string.dump` of a small function, as hex (the sandbox has
/// no `string.dump`; stock Lua makes real bytecode for it).
fn stock_bytecode_hex() -> String {
    quirl_lua_testkit::stock::run(
        "return (string.dump(function() return 'escaped' end):gsub('.', function(c) \
         return string.format('%02x', c:byte()) end))",
        "=eval",
    )
    .unwrap()
    .split('\t')
    .next()
    .unwrap()
    .to_owned()
}

// SPEC §15.1-e, DESIGN §15.3
#[test]
fn real_bytecode_is_refused_whatever_the_mode() {
    let hex = stock_bytecode_hex();
    assert!(hex.starts_with("1b4c7561"), "{hex}");
    // Stock Lua loads it: the refusal below is the sandbox's.
    let stock = quirl_lua_testkit::stock::run(
        &format!(
            "local b = ('{hex}'):gsub('..', function(h) return string.char(tonumber(h, 16)) end) \
             return load(b)()"
        ),
        "=eval",
    );
    assert_eq!(stock, Ok("escaped".to_owned()));
    let mut vm = loading_vm();
    let source = format!(
        "local b = ('{hex}'):gsub('..', function(h) return string.char(tonumber(h, 16)) end) \
         local out = {{}} \
         for _, mode in ipairs({{'b', 'bt', 't', 'tb'}}) do \
           local f, message = load(b, 'chunk', mode) out[#out + 1] = tostring(f) .. ' ' .. message \
         end \
         local f, message = load(b) out[#out + 1] = tostring(f) .. ' ' .. message \
         local parts, i = {{b:sub(1, 3), b:sub(4)}}, 0 \
         f, message = load(function() i = i + 1 return parts[i] end, 'reader', 'b') \
         out[#out + 1] = tostring(f) .. ' ' .. message \
         return table.concat(out, '|')"
    );
    assert_eq!(
        success(eval(&mut vm, &source)),
        json!(
            "nil attempt to load a binary chunk (mode is 'b')|\
             nil attempt to load a binary chunk (mode is 'bt')|\
             nil attempt to load a binary chunk (mode is 't')|\
             nil attempt to load a binary chunk (mode is 'tb')|\
             nil attempt to load a binary chunk (mode is 't')|\
             nil attempt to load a binary chunk (mode is 'b')"
        )
    );
}

#[test]
fn a_serializer_round_trips_data_through_load() {
    let source = r#"
local function serialize(v, out)
  local t = type(v)
  if t == "table" then
    out[#out + 1] = "{"
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      out[#out + 1] = "["
      serialize(k, out)
      out[#out + 1] = "]="
      serialize(v[k], out)
      out[#out + 1] = ","
    end
    out[#out + 1] = "}"
  else
    out[#out + 1] = string.format("%q", v)
  end
  return out
end
local function equal(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then
    return a == b or (a ~= a and b ~= b)
  end
  for k, v in pairs(a) do if not equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
local data = {
  name = "quo\"te\n\0\r\\ and ünïcode", n = 42, big = math.maxinteger, small = math.mininteger,
  pi = math.pi, third = 1 / 3, inf = math.huge, ninf = -math.huge, neg = -0.5,
  flags = {true, false, true}, nested = {deeper = {deepest = {"x", 1.5e300}}},
  [1] = "one", [2.5] = "float key",
}
local text = table.concat(serialize(data, {}))
local back = assert(load("return " .. text, "=data", "t", {}))()
return {equal = equal(data, back), again = table.concat(serialize(back, {})) == text,
        name = back.name, big = back.big == math.maxinteger, third = back.third == 1 / 3}
"#;
    let value = success(eval(&mut loading_vm(), source));
    assert_eq!(
        value,
        json!({"equal": true, "again": true, "name": "quo\"te\n\0\r\\ and ünïcode",
               "big": true, "third": true})
    );
}

#[test]
fn a_template_engine_compiles_templates_to_lua() {
    let source = r#"
local function compile(template, name)
  local code, pos = {"local _out = {} "}, 1
  while true do
    local s, e, kind, body = template:find("{([{%%])(.-)[}%%]}", pos)
    if not s then break end
    code[#code + 1] = string.format("_out[#_out + 1] = %q ", template:sub(pos, s - 1))
    if kind == "{" then
      code[#code + 1] = "_out[#_out + 1] = tostring(" .. body .. ") "
    else
      code[#code + 1] = body .. " "
    end
    pos = e + 1
  end
  code[#code + 1] = string.format("_out[#_out + 1] = %q return table.concat(_out)", template:sub(pos))
  return function(env)
    setmetatable(env, {__index = _G})
    local f, err = load(table.concat(code), "=" .. name, "t", env)
    if not f then error(err, 0) end
    return f()
  end
end
local page = compile("Hello {{name}}!{% for i = 1, n do %} {{i * i}}{% end %}.", "page")
local broken = compile("{{1 +}}", "broken")
local ok, message = pcall(broken, {})
return {page = page({name = "Ada", n = 4}), again = page({name = "Bob", n = 1}),
        ok = ok, message = message}
"#;
    let value = success(eval(&mut loading_vm(), source));
    assert_eq!(
        value,
        json!({"page": "Hello Ada! 1 4 9 16.", "again": "Hello Bob! 1.", "ok": false,
               "message": "broken:1: unexpected symbol near ')'"})
    );
}

#[test]
fn a_lua_5_3_operator_shim_loads_the_operators_at_run_time() {
    // Libraries written for 5.1 to 5.4 hide 5.3 syntax from older parsers.
    let source = r#"
local idiv = load[[return function(a, b) return a // b end]]()
local bits = load[[return function(a, b) return a & b, a | b, a ~ b, a << b, a >> b, ~a end]]()
local band, bor, bxor, shl, shr, bnot = bits(12, 2)
return {idiv(7, 2), idiv(-7, 2), idiv(7.0, 2), band, bor, bxor, shl, shr, bnot}
"#;
    assert_eq!(
        success(eval(&mut loading_vm(), source)),
        json!([3, -4, 3.0, 0, 14, 14, 48, 3, -13])
    );
}

#[test]
fn a_module_set_loads_through_require() {
    // The shape of a multi-file library: modules preloaded from their
    // sources with `@FILE` chunk names (as `quirl-lua --module` does),
    // requiring one another, cached in package.loaded, and an error inside
    // a module named after its file and line.
    let mut vm = loading_vm();
    let preload = r#"
package.preload["lib.strings"] = assert(load([==[
local M = {}
function M.shout(s) return s:upper() .. "!" end
function M.fail() error("strings failed") end
return M
]==], "@lib/strings.lua"))
package.preload["lib"] = assert(load([==[
local strings = require("lib.strings")
local M = {loads = (M_loads or 0) + 1}
M_loads = M.loads
function M.greet(name) return strings.shout("hello " .. name) end
M.fail = strings.fail
return M
]==], "@lib/init.lua"))
"#;
    assert_eq!(success(eval(&mut vm, preload)), json!(null));
    let value = success(eval(
        &mut vm,
        "local lib = require('lib') local again = require('lib') \
         local ok, message = pcall(lib.fail) \
         return {lib.greet('ada'), again == lib, lib.loads, message, \
                 package.loaded['lib.strings'] == require('lib.strings')}",
    ));
    assert_eq!(
        value,
        json!([
            "HELLO ADA!",
            true,
            1,
            "lib/strings.lua:3: strings failed",
            true
        ])
    );
    let error = failure(eval(&mut vm, "require('lib').fail()"));
    assert_eq!(
        error.message,
        "Lua runtime error: lib/strings.lua:3: strings failed"
    );
}

// SPEC §15.1-c, DESIGN §15.6
#[test]
fn an_endless_stream_of_compiled_chunks_ends_by_the_instruction_budget() {
    let budgets = Budgets {
        instruction_limit: 5_000_000,
        wall_time_ms: 60_000,
        ..POLICY
    };
    // Each chunk is compiled and thrown away: few VM instructions per
    // iteration, so the parser's charge is what ends the loop.
    let mut vm = loading_vm_with(budgets);
    let verdict = eval(
        &mut vm,
        "local chunk = ('local x = 1 + 2 * 3 ' ):rep(200) \
         while true do assert(load(chunk)) end",
    );
    assert_eq!(tripped(verdict), "instructions");
}

// DESIGN §15.6
#[test]
fn compiling_one_chunk_is_charged_by_its_size() {
    // One unit per 4 bytes of source read: a 240 KB chunk of global
    // assignments (no locals, so it compiles) costs 60,000 units to compile,
    // more than the whole budget, though running the load call is a handful
    // of instructions and building the text (40 copies of 6 KB, charged by
    // its buffer and the result string) is cheap.
    let budgets = Budgets {
        instruction_limit: 50_000,
        ..POLICY
    };
    let mut vm = loading_vm_with(budgets);
    assert_eq!(
        success(eval(
            &mut vm,
            "small = ('x = 1 '):rep(1000) big = small:rep(40) \
             return {type(load(small)), #big}"
        )),
        json!(["function", 240_000])
    );
    let verdict = eval(&mut vm, "local f = load(big) return f ~= nil");
    assert_eq!(tripped(verdict), "instructions");
}

// DESIGN §15.6
#[test]
fn a_reader_that_never_ends_its_chunk_ends_by_a_limit() {
    // `load(function() return 1 end)`: Lua converts the number to the piece
    // "1", so the chunk is an endless numeral; stock Lua reads until its
    // memory runs out. In the sandbox each piece is a call of the reader.
    let mut vm = loading_vm();
    let verdict = eval(&mut vm, "return load(function() return 1 end)");
    assert_eq!(tripped(verdict), "instructions");
    // A piece of a few bytes at a time, yielded from a coroutine.
    let verdict = eval(
        &mut vm,
        "return load(coroutine.wrap(function() while true do coroutine.yield('x = 1 ') end end))",
    );
    assert_eq!(tripped(verdict), "instructions");
}

// SPEC §15.1-b
#[test]
fn a_huge_chunk_ends_by_the_memory_limit() {
    let budgets = Budgets {
        memory_limit_bytes: 8 * 1024 * 1024,
        instruction_limit: 100_000_000,
        wall_time_ms: 60_000,
        ..POLICY
    };
    let mut vm = loading_vm_with(budgets);
    // 3 MB of source whose code is larger still: the parser's arrays grow
    // past the limit before anything runs.
    let verdict = eval(
        &mut vm,
        "local f = load('return {' .. ('{},'):rep(1000000) .. '}') return f ~= nil",
    );
    assert_eq!(tripped(verdict), "memory");
}

#[test]
fn without_the_grant_nothing_changes() {
    for grants in [
        None,
        Some(vec![]),
        Some(vec!["process.spawn", "lua.loader"]),
    ] {
        let mut vm = vm_granting(POLICY, grants.clone());
        let globals = success(eval(
            &mut vm,
            "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t",
        ));
        let mut expected: Vec<&str> = GLOBALS.to_vec();
        expected.sort_unstable();
        assert_eq!(globals, json!(expected), "grants {grants:?}");
        let error = failure(eval(&mut vm, "return load('return 1')"));
        assert_eq!(
            error.message,
            "Lua runtime error: attempt to call a nil value (global 'load')"
        );
        let error = failure(eval(&mut vm, "require('json')"));
        assert_eq!(
            error.message,
            "Lua runtime error: attempt to call a nil value (global 'require')"
        );
    }
}

#[test]
fn loaded_chunk_errors_reach_the_error_record_under_their_own_name() {
    let mut vm = loading_vm();
    let error = failure(eval(
        &mut vm,
        "local f = assert(load('local x = nil\\nreturn x.y', '@other.lua')) return f()",
    ));
    assert_eq!(
        error.message,
        "Lua runtime error: other.lua:2: attempt to index a nil value (local 'x')"
    );
    let error = failure(eval(&mut vm, "assert(load('return +', '=cfg'))"));
    assert_eq!(
        error.message,
        "Lua runtime error: cfg:1: unexpected symbol near '+'"
    );
}
