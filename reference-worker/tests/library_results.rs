//! Library results read as Lua's own (DESIGN §15.6, §15.11): the sandbox
//! wraps many library functions (to charge native work, to rewrite errors),
//! and a wrapper must hand back exactly what the original returns — the same
//! number of results, of the same types and values — including at the edges
//! where Lua returns one `nil`, several values or nothing at all (end of a
//! traversal, no match, an iterator called by hand). For a table of
//! expressions, what a guest sees equals what an unrestricted Lua 5.4 state
//! in this test process gives for the same source.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Successful library calls, each an expression list (`...` of `show`).
const CALLS: &[&str] = &[
    // base: traversal and its ends
    "next({})",
    "next({}, nil)",
    "next({1})",
    "next({1}, 1)",
    "next({a = 1}, 'a')",
    "next({1, 2, a = 3}, 2)",
    "pairs({})",
    "ipairs({})",
    "(ipairs({}))({}, 0)",
    "(ipairs({7}))({7}, 0)",
    "(pairs({}))({})",
    "select('#')",
    "select(-1, 1, 2, 3)",
    "select(2, 'a', 'b', 'c')",
    "rawequal({}, {})",
    "rawlen({1, 2})",
    "rawget({a = 1}, 'a')",
    "rawget({}, 'a')",
    "tonumber('zz')",
    "tonumber('10', 2)",
    "tonumber('  0x10  ')",
    "tonumber('1e')",
    "tostring(nil)",
    "type(nil)",
    "getmetatable({})",
    "getmetatable(setmetatable({}, {__metatable = 'locked'}))",
    "assert(1, 2, 3)",
    "pcall(function() end)",
    "pcall(function() return nil, nil end)",
    "pcall(error)",
    "pcall(error, nil)",
    "xpcall(function() return 1, 2 end, function(m) return m end)",
    "select('#', pcall(function() return end))",
    // string: no match, empty captures, position captures
    "string.find('abc', 'x')",
    "string.find('abc', 'b')",
    "string.find('abc', '(b)(c)')",
    "string.find('abc', '', 10)",
    "string.find('abc', '', 4)",
    "string.find('a.b', '.', 2, true)",
    "string.find('abc', 'c', -1)",
    "string.match('abc', 'x')",
    "string.match('abc', '()b()')",
    "string.match('key=val', '(%w+)=(%w*)')",
    "string.match('abc', '')",
    "string.match('abc', '.', -1)",
    "string.gsub('abc', 'x', 'y')",
    "string.gsub('abc', '', '-')",
    "string.gsub('hello', 'l', function() return nil end)",
    "string.gsub('hello', 'l', {l = false})",
    "string.gsub('a,b,,c', ',', ';', 2)",
    "string.gsub('abc', '%w', '%0%0', 0)",
    "(string.gmatch('abc', 'x'))()",
    "(string.gmatch('a1', '(%a)(%d)'))()",
    "(string.gmatch('abc', '()'))()",
    "string.byte('')",
    "string.byte('abc', 10)",
    "string.byte('abc', 1, -1)",
    "string.byte('abc', 0)",
    "string.sub('abc', 5)",
    "string.rep('x', 0)",
    "string.rep('x', -1)",
    "string.rep('ab', 3, ',')",
    "string.char()",
    "string.len('')",
    "string.reverse('')",
    "string.format('%q', 1/0)",
    "string.format('%5.1f|%-3d|%x', 2.25, 7, 255)",
    // string.format's short path (few arguments, no object, short strings,
    // no 'p' in the format) and the general one give the same text
    "string.format('[%5s][%-5s][%.2s]', 12, 3.5, 'abcdef')",
    "string.format('%d pages', 3)",
    "string.format('%s %s %d', true, nil, 7)",
    "string.format('%d%d%d%d%d%d%d%d%d%d', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)",
    "string.format('%d', 1, 2, 3)",
    "#string.format('%s|%10s', string.rep('x', 100), string.rep('y', 70))",
    "table.concat({1, 2}, nil)",
    "table.unpack({1, nil, 3})",
    "string.unpack('<i2 >i2', '\\1\\0\\0\\1')",
    "string.unpack('z', 'ab\\0cd')",
    "string.unpack('s1', '\\2ab', 1)",
    "string.packsize('i4 i8')",
    "string.pack('>I2', 258):byte(1, -1)",
    // utf8: failures as results, iterators by hand
    "utf8.len('h\\u{e4}llo')",
    "utf8.len('\\xff')",
    "utf8.len('abc', 4)",
    "utf8.len('')",
    "utf8.offset('a\\u{e9}\\u{20ac}', 3)",
    "utf8.offset('abc', 10)",
    "utf8.offset('abc', 0, 2)",
    "utf8.codepoint('abc', 1, -1)",
    "utf8.codepoint('', 1, 0)",
    "utf8.char()",
    "utf8.char(72, 228)",
    "(utf8.codes('ab'))('ab', 0)",
    "(utf8.codes('ab'))('ab', 2)",
    "(utf8.codes(''))('', 0)",
    // table
    "table.unpack({})",
    "table.unpack({1, 2, 3}, 2)",
    "table.unpack({1, 2, 3}, 2, 5)",
    "table.unpack({1, 2}, 3, 2)",
    "table.concat({})",
    "table.concat({1, 'a', 2.5}, '-')",
    "table.concat({1, 2, 3}, ',', 2, 3)",
    "table.concat({1, 2}, ',', 3)",
    "table.remove({})",
    "table.remove({}, 0)",
    "table.remove({1, 2})",
    "table.remove({1, 2}, 1)",
    "table.remove({1, 2}, 3)",
    "table.insert({}, 1)",
    "table.sort({})",
    "table.pack()",
    "table.pack(nil, nil).n",
    "table.move({1, 2, 3}, 1, 3, 2)[3]",
    "table.move({1}, 1, 0, 1)[1]",
    // table.remove on a table with metamethods clears t[pos] also at
    // #t + 1 and at 0 (Lua's tremove always ends with `t[pos] = nil`)
    "(function() local log = {} local t = setmetatable({}, {__newindex = function(t, k, v) \
      log[#log + 1] = tostring(k) .. '=' .. tostring(v) rawset(t, k, v) end}) \
      t[1] = 'a' local r = table.remove(t, 2) local r0 = table.remove(setmetatable({}, getmetatable(t))) \
      return r, r0, table.concat(log, ',') end)()",
    "(function() local t = setmetatable({}, {__index = function(_, k) return 'v' .. k end}) \
      return table.remove(t, 1), table.remove(t, 0), rawget(t, 1) end)()",
    // math
    "math.tointeger(3.5)",
    "math.tointeger('8')",
    "math.tointeger(2^53)",
    "math.type('1')",
    "math.type(1.0)",
    "math.fmod(-7, 3)",
    "math.fmod(7, -3.0)",
    "math.abs(math.mininteger)",
    "math.ult(1, -1)",
    "math.max(1, 5.5, 3)",
    "math.min(2)",
    "math.floor(-0.5)",
    "math.ceil(-0.5)",
    "math.modf(3.7)",
    "math.modf(-3)",
    "math.modf(math.huge)",
    // coroutine
    "coroutine.resume(coroutine.create(function() end))",
    "coroutine.resume(coroutine.create(function(...) return ... end), 1, nil)",
    "coroutine.resume(coroutine.create(function() coroutine.yield() end))",
    "coroutine.resume(coroutine.create(function() coroutine.yield(nil, 2) end))",
    "coroutine.status(coroutine.create(function() end))",
    "coroutine.isyieldable()",
    "coroutine.close(coroutine.create(function() end))",
    "coroutine.wrap(function(...) return select('#', ...) end)(nil, nil)",
    "coroutine.wrap(function() end)()",
];

/// Stock Lua 5.4.9 (the VM's release without the metering patch) with
/// the full standard library.
fn reference(source: &str) -> String {
    quirl_lua_testkit::stock::run(source, "=eval")
        .unwrap_or_else(|e| panic!("the reference runs {source}: {e}"))
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

#[test]
fn guests_see_luas_own_library_results() {
    let mut vm = vm();
    let mut mismatches = Vec::new();
    for call in CALLS {
        for source in [
            format!("{SHOW}return show({call})"),
            // the same call through pcall and in a coroutine: wrappers that
            // are Lua functions must not change the count there either
            format!("{SHOW}return show(pcall(function() return {call} end))"),
            format!(
                "{SHOW}return show(coroutine.resume(coroutine.create(function() return {call} end)))"
            ),
        ] {
            let expected = reference(&source);
            let actual = success(eval(&mut vm, &source));
            if actual != serde_json::json!(expected) {
                mismatches.push(format!(
                    "{call}\n  lua:     {expected}\n  sandbox: {actual}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn traversals_written_with_next_by_hand_end_as_in_lua() {
    // A common idiom: `while true do k = next(t, k) if k == nil then break end`
    // and `select('#', next(t, k))` at the last key.
    let source = format!(
        "{SHOW}local t = {{10, 20, x = 30}}\n\
         local seen, k = 0, nil\n\
         repeat k = next(t, k) if k ~= nil then seen = seen + 1 end until k == nil\n\
         local last\n\
         for key in pairs(t) do last = key end\n\
         return show(seen, select('#', next(t, last)), next(t, last))"
    );
    let mut vm = vm();
    assert_eq!(
        success(eval(&mut vm, &source)),
        serde_json::json!(reference(&source))
    );
    assert_eq!(
        success(eval(&mut vm, &source)),
        serde_json::json!("3 [number:3, number:1, nil:nil]")
    );
}

#[test]
fn sorts_of_tables_with_metatables_read_and_write_as_lua_does() {
    // Lua's sort reads and writes a table with a metatable through
    // lua_geti/lua_seti as it goes: a proxy sees every read and write in
    // Lua's order, a failing comparator leaves the table half sorted, and a
    // comparator cannot yield (it is called from C).
    let source = r##"local function logged(backing, log)
  return setmetatable({}, {
    __index = function(_, k) log[#log + 1] = "r" .. k; return backing[k] end,
    __newindex = function(_, k, v) log[#log + 1] = "w" .. k .. "=" .. tostring(v); backing[k] = v end,
    __len = function() return #backing end })
end
local function run(values, comp)
  local log, backing = {}, {}
  for i, v in ipairs(values) do backing[i] = v end
  local ok, e = pcall(table.sort, logged(backing, log), comp)
  return tostring(ok) .. " " .. tostring(e) .. " | " .. table.concat(backing, ",") .. " | " .. table.concat(log, " ")
end
local big, odd = {}, {}
for i = 1, 300 do big[i] = (i * 7919) % 1000 end
for i = 1, 40 do odd[i] = i % 7 end
local out = {
  run({3, 1, 2}),
  run({2, 1}),
  run({1}, 5),
  run({5, 9, 1, 7, 3, 8, 2, 6, 4, 0}, function(a, b) return a > b end),
  run(big),
  run(odd, function() return true end),
  run({3, 1, 2, 5, 4}, function(a, b) if a == 5 or b == 5 then error("no fives") end return a < b end),
  run({3, 1, 2}, function() error("level two", 2) end),
  run({3, "x", 2}),
  coroutine.wrap(function() return run({3, 1, 2}, function(a, b) coroutine.yield() return a < b end) end)(),
}
local list = setmetatable({5, 4, 3, 2, 1, 9, 8, 7}, {__index = table})
local n = 0
local ok, e = pcall(list.sort, list, function(a, b) n = n + 1; if n == 6 then error("stop", 0) end return a < b end)
out[#out + 1] = tostring(ok) .. " " .. e .. " " .. list:concat(",")
list:sort()
out[#out + 1] = list:concat(",")
local t = setmetatable({3, 1, 2}, {__len = function() return "3" end})
table.sort(t)
out[#out + 1] = table.concat(t, ",", 1, 3)
return table.concat(out, "\n")
"##;
    let expected = reference(source);
    assert!(
        expected.contains("r1 r3 w1=2 w3=3"),
        "the reference logs the proxy's reads and writes: {expected}"
    );
    let mut vm = vm();
    assert_eq!(success(eval(&mut vm, source)), serde_json::json!(expected));
}
