//! Programs shaped like real Lua code run as in Lua (DESIGN §15.3–§15.7,
//! §15.11): classes with metatables, a JSON-like encoder and decoder, string
//! utilities, coroutine generators, numeric kernels, hand-written
//! traversals and error handling. The sandbox wraps many library functions
//! (to charge native work, to rewrite errors); none of that may change what
//! a program computes. Each program avoids what the sandbox leaves out by
//! design (`load`, `print`, `io`, `os`, `require`, `debug`, `string.dump`,
//! `__gc`, `getmetatable("")`) and returns one string; the sandbox, under
//! the default budgets of `quirl-lua`, must return exactly what an
//! unrestricted Lua 5.4 state in this test process returns for the same
//! source under the same chunk name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// `quirl-lua`'s default budgets (32 MiB, 100 M instructions).
const DEFAULTS: Budgets = Budgets {
    memory_limit_bytes: 32 * 1024 * 1024,
    instruction_limit: 100_000_000,
    wall_time_ms: 30_000,
    ..POLICY
};

/// A local `print` that collects lines, as a program written for the
/// command line would print them; every program returns `output()`.
const PRELUDE: &str = r##"local lines = {}
local function print(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  lines[#lines + 1] = table.concat(parts, "\t")
end
local function output() return table.concat(lines, "\n") end
"##;

/// Classes: inheritance through `__index`, `super` calls, metamethods,
/// mixins, sorting instances and printing them.
const CLASSES: &str = r##"
local function class(parent)
  local c = {}
  c.__index = c
  if parent then setmetatable(c, {__index = parent}) end
  c.super = parent
  c.new = function(self, ...)
    local o = setmetatable({}, self)
    if o.init then o:init(...) end
    return o
  end
  return c
end

local Shape = class()
function Shape:init(name) self.name = name end
function Shape:area() return 0 end
function Shape:describe() return string.format("%s with area %.2f", self.name, self:area()) end
Shape.__tostring = function(s) return "Shape(" .. s.name .. ")" end
Shape.__lt = function(a, b) return a:area() < b:area() end
Shape.__le = function(a, b) return a:area() <= b:area() end
Shape.__eq = function(a, b) return a:area() == b:area() end

local Rect = class(Shape)
Rect.__tostring, Rect.__lt, Rect.__le, Rect.__eq = Shape.__tostring, Shape.__lt, Shape.__le, Shape.__eq
function Rect:init(w, h) Shape.init(self, "rect"); self.w, self.h = w, h end
function Rect:area() return self.w * self.h end

local Circle = class(Shape)
Circle.__tostring, Circle.__lt, Circle.__le, Circle.__eq = Shape.__tostring, Shape.__lt, Shape.__le, Shape.__eq
function Circle:init(r) self.super.init(self, "circle"); self.r = r end
function Circle:area() return math.pi * self.r ^ 2 end

local Square = class(Rect)
Square.__tostring = function(s) return "Square[" .. s.w .. "]" end
Square.__lt, Square.__le, Square.__eq = Shape.__lt, Shape.__le, Shape.__eq
Square.__len = function(s) return 4 end
Square.__call = function(s, k) return s.w * k end
Square.__concat = function(a, b) return tostring(a) .. "&" .. tostring(b) end
function Square:init(s) Rect.init(self, s, s); self.name = "square" end

local Serializable = {
  serialize = function(self)
    local keys = {}
    for k in pairs(self) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(self[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end,
}
for k, v in pairs(Serializable) do Shape[k] = v end

local shapes = { Rect:new(3, 4), Circle:new(1), Square:new(2), Rect:new(1, 1), Circle:new(2) }
table.sort(shapes, function(a, b) return a < b end)
for i, s in ipairs(shapes) do print(i, tostring(s), s:describe(), s:serialize()) end
table.sort(shapes, function(a, b) return a > b end)
print(tostring(shapes[1]), shapes[1] >= shapes[2], Square:new(2) == Rect:new(1, 4), #Square:new(3))
local sq = Square:new(5)
print(sq(3), sq .. Rect:new(1, 2), "x" .. tostring(sq), rawequal(sq, Square:new(5)))
print(getmetatable(sq) == Square, Square.super == Rect, rawget(sq, "area"), sq.area == Rect.area)
print(pcall(function() return sq:perimeter() end))
print(pcall(function() return shapes < 1 end))
print(select("#", Shape:new("x"):area()), string.format("%s|%10s|%-12s|", sq, Circle:new(0), Rect:new(0, 0)))
return output()
"##;

/// A JSON encoder and a position-driven decoder with error messages.
const JSON: &str = r##"
local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
                  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function escape(c) return escapes[c] or string.format("\\u%04x", c:byte()) end

local encode
local function is_array(t)
  local n = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = math.max(n, k)
  end
  return n == #t
end
encode = function(v, seen)
  seen = seen or {}
  local t = type(v)
  if t == "nil" then return "null"
  elseif t == "boolean" then return tostring(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then error("unexpected number value '" .. tostring(v) .. "'") end
    if math.type(v) == "integer" then return tostring(v) end
    return string.format("%.14g", v)
  elseif t == "string" then return '"' .. v:gsub('[%c"\\]', escape) .. '"'
  elseif t == "table" then
    if seen[v] then error("circular reference") end
    seen[v] = true
    local out = {}
    if is_array(v) then
      for i = 1, #v do out[i] = encode(v[i], seen) end
      seen[v] = nil
      return "[" .. table.concat(out, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do
      if type(k) ~= "string" then error("invalid table: mixed or invalid key types") end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    for i, k in ipairs(keys) do out[i] = encode(k) .. ":" .. encode(v[k], seen) end
    seen[v] = nil
    return "{" .. table.concat(out, ",") .. "}"
  end
  error("unexpected type '" .. t .. "'")
end

local decode
local function skip(s, i) return (s:find("[^ \t\r\n]", i)) or #s + 1 end
local function fail(s, i, msg)
  local line, col = 1, 1
  for j = 1, i - 1 do
    col = col + 1
    if s:sub(j, j) == "\n" then line, col = line + 1, 1 end
  end
  error(string.format("%s at line %d col %d", msg, line, col), 0)
end
local literals = { ["true"] = true, ["false"] = false }
local function parse(s, i)
  i = skip(s, i)
  local c = s:sub(i, i)
  if c == "{" then
    local obj = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "}" then return obj, i + 1 end
    while true do
      local key
      key, i = parse(s, i)
      if type(key) ~= "string" then fail(s, i, "expected string for key") end
      i = skip(s, i)
      if s:sub(i, i) ~= ":" then fail(s, i, "expected ':' after key") end
      obj[key], i = parse(s, i + 1)
      i = skip(s, i)
      local d = s:sub(i, i)
      i = i + 1
      if d == "}" then return obj, i end
      if d ~= "," then fail(s, i - 1, "expected '}' or ','") end
    end
  elseif c == "[" then
    local arr, n = {}, 0
    i = skip(s, i + 1)
    if s:sub(i, i) == "]" then return arr, i + 1 end
    while true do
      n = n + 1
      arr[n], i = parse(s, i)
      i = skip(s, i)
      local d = s:sub(i, i)
      i = i + 1
      if d == "]" then return arr, i end
      if d ~= "," then fail(s, i - 1, "expected ']' or ','") end
    end
  elseif c == '"' then
    local j, parts = i + 1, {}
    while true do
      local k = s:find('["\\]', j)
      if not k then fail(s, i, "expected closing quote for string") end
      parts[#parts + 1] = s:sub(j, k - 1)
      if s:sub(k, k) == '"' then return table.concat(parts), k + 1 end
      local e = s:sub(k + 1, k + 1)
      if e == "u" then
        local hex = s:match("^%x%x%x%x", k + 2) or fail(s, k, "invalid unicode escape")
        parts[#parts + 1] = utf8.char(tonumber(hex, 16))
        j = k + 6
      else
        local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
        parts[#parts + 1] = map[e] or fail(s, k, "invalid escape char '" .. e .. "'")
        j = k + 2
      end
    end
  else
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if num and #num > 0 then
      local v = tonumber(num) or fail(s, i, "invalid number '" .. num .. "'")
      return v, i + #num
    end
    local word = s:match("^%a+", i)
    if word == "null" then return nil, i + 4 end
    if word and literals[word] ~= nil then return literals[word], i + #word end
    fail(s, i, "unexpected character '" .. c .. "'")
  end
end
decode = function(s)
  local v, i = parse(s, 1)
  i = skip(s, i)
  if i <= #s then fail(s, i, "trailing garbage") end
  return v
end

local doc = {
  name = "quirl \"test\"\n", version = 3, ratio = 0.125, big = 2^53, neg = -17,
  list = { 1, 2.5, "three", true, false, { nested = { deeper = { "x" } } } },
  empty_list = {}, unicode = "h\u{e9}llo \u{1F600}", ctrl = "a\1b\31c",
}
local text = encode(doc)
print(text)
local back = decode(text)
print(encode(back) == text, back.list[6].nested.deeper[1], back.unicode == doc.unicode, math.type(back.version), back.ratio)
local inputs = {
  '{"a": [1, 2, {"b": null}], "c": "\\u0041\\n"}',
  '[1, 2', '{"a" 1}', '{"a": tru}', '"unterminated', '[1,]', '{"x": 1} x', '"\\q"',
  '  [ -1.5e3 , 0.25, 1E2, -0 ]  ', '{"k": "\\u00e9\\u4e2d"}',
}
for _, s in ipairs(inputs) do
  local ok, v = pcall(decode, s)
  print(ok, ok and encode(v) or v)
end
print(pcall(encode, { 1, 2, x = 3 }))
print(pcall(encode, { f = print }))
print(pcall(encode, 0 / 0))
local cyc = {}
cyc.self = cyc
print(pcall(encode, cyc))
return output()
"##;

/// String utilities of the kind every project carries.
const STRINGS: &str = r##"
local function split(s, sep, plain)
  local out, pos = {}, 1
  if sep == "" then for c in s:gmatch(".") do out[#out + 1] = c end return out end
  while true do
    local i, j = s:find(sep, pos, plain)
    if not i then out[#out + 1] = s:sub(pos) break end
    out[#out + 1] = s:sub(pos, i - 1)
    pos = j + 1
  end
  return out
end
local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end
local function startswith(s, p) return s:sub(1, #p) == p end
local function endswith(s, p) return p == "" or s:sub(-#p) == p end
local function title(s) return (s:gsub("%f[%a](%a)(%a*)", function(a, b) return a:upper() .. b:lower() end)) end
local function wrap(text, width)
  local lines, line = {}, ""
  for word in text:gmatch("%S+") do
    if #line + #word + 1 > width and #line > 0 then lines[#lines + 1] = line; line = word
    else line = (#line > 0) and (line .. " " .. word) or word end
  end
  if #line > 0 then lines[#lines + 1] = line end
  return lines
end
local function interpolate(s, vars)
  return (s:gsub("%${([%w_]+)}", function(k) return tostring(vars[k] or "${" .. k .. "}") end))
end
local function count(s, pat) return select(2, s:gsub(pat, "")) end
local function camel_to_snake(s) return (s:gsub("(%l)(%u)", "%1_%2"):lower()) end
local function escape_pattern(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end
local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function hexdump(s) return (s:gsub(".", function(c) return string.format("%02x ", c:byte()) end)) end
local function ulen_reverse(s)
  local cps = {}
  for _, c in utf8.codes(s) do table.insert(cps, 1, c) end
  return utf8.len(s), utf8.char(table.unpack(cps))
end

print(table.concat(split("a,b,,c,", ","), "|"), #split("", ","), table.concat(split("a.b.c", ".", true), "/"))
print(table.concat(split("one  two\tthree", "%s+"), "|"), table.concat(split("abc", ""), "-"))
print("[" .. trim("  \t hello world \n ") .. "]", "[" .. trim("") .. "]", startswith("prefix-rest", "prefix"), endswith("file.lua", ".lua"), endswith("x", ""))
print(title("the QUICK brown fox's tale"), camel_to_snake("parseHttpRequestHeader"))
for i, l in ipairs(wrap("The quick brown fox jumps over the lazy dog and keeps running far away", 20)) do print(i, l) end
print(interpolate("Hello ${name}, you are ${age} (${missing})", { name = "Ada", age = 36 }))
print(count("the cat sat on the mat", "at"), count("aaaa", "aa"), count("", "x"))
print(escape_pattern("1+1=2? (yes) [50%] ^$"), ("a.b"):find(escape_pattern("."), 1))
print(shell_quote("it's here"), hexdump("Lua\0\255"))
print(ulen_reverse("h\u{e9}llo w\u{f6}rld \u{1F600}"))
print(("%d items at %5.2f = %-8s|"):format(3, 9.5, "total"), ("x"):rep(3, "-"), ("abc"):reverse():upper())
print(string.format("%q", 'line1\nline2\t"quoted"\\ \0 end'), string.format("%q", 255), string.format("%q", -0.5))
print(("key = value # comment"):match("^(%w+)%s*=%s*(.-)%s*#"), ("  indented"):match("^(%s*)"):len())
print(("f(a, g(b, c), d)"):match("%b()"), ("[[nested]] [x]"):gsub("%b[]", "<>"))
print(("2024-03-09T12:34:56Z"):match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)Z$"))
print(("THE END"):lower(), ("mixed Case 123"):gsub("%a", { m = "M", C = "c" }), ("abc"):byte(1, -1))
print(table.concat({ ("one two three"):match("(%a+) (%a+) (%a+)") }, ","), ("x=1,y=2"):gsub("(%w+)=(%w+)", "%2=%1"))
local words = {}
for w in ("banana apple Cherry apple date"):gmatch("%a+") do words[#words + 1] = w end
table.sort(words, function(a, b) return a:lower() < b:lower() end)
print(table.concat(words, " "), #table.concat(words), select("#", ("abc"):byte(1, 10)))
return output()
"##;

/// Coroutine generators: pipelines, permutations, yields across pcall,
/// `<close>` variables and errors through `coroutine.wrap`.
const GENERATORS: &str = r##"
local function range(n, step)
  return coroutine.wrap(function()
    for i = 1, n, step or 1 do coroutine.yield(i) end
  end)
end
local function filter(pred, gen)
  return coroutine.wrap(function()
    for v in gen do if pred(v) then coroutine.yield(v) end end
  end)
end
local function map(f, gen)
  return coroutine.wrap(function() for v in gen do coroutine.yield(f(v)) end end)
end
local function collect(gen) local t = {} for v in gen do t[#t + 1] = v end return t end
print(table.concat(collect(map(function(x) return x * x end, filter(function(x) return x % 3 == 0 end, range(30)))), ","))

local function permgen(a, n)
  n = n or #a
  if n <= 1 then coroutine.yield(a) else
    for i = 1, n do
      a[n], a[i] = a[i], a[n]
      permgen(a, n - 1)
      a[n], a[i] = a[i], a[n]
    end
  end
end
local perms = {}
for p in coroutine.wrap(function() permgen({ "a", "b", "c", "d" }) end) do perms[#perms + 1] = table.concat(p) end
print(#perms, perms[1], perms[24], table.concat(perms, " ", 5, 8))

local function fib()
  local a, b = 0, 1
  return coroutine.wrap(function() while true do coroutine.yield(a); a, b = b, a + b end end)
end
local f, fibs = fib(), {}
for i = 1, 90 do fibs[i] = f() end
print(fibs[10], fibs[90], math.type(fibs[90]))

local co = coroutine.create(function(a, b)
  local c = coroutine.yield(a + b)
  local d, e = coroutine.yield(c * 2)
  return d + e, "done"
end)
print(coroutine.resume(co, 1, 2))
print(coroutine.status(co), coroutine.resume(co, 10))
print(coroutine.resume(co, 3, 4))
print(coroutine.status(co), coroutine.resume(co))

local log = {}
local worker = coroutine.wrap(function()
  for i = 1, 3 do
    local ok, got = pcall(function() return coroutine.yield(i) end)
    log[#log + 1] = tostring(ok) .. ":" .. tostring(got)
  end
  local ok, err = pcall(function() local x = coroutine.yield("last"); error("failed with " .. x) end)
  log[#log + 1] = tostring(ok) .. ":" .. err
  return "end"
end)
print(worker(), worker("a"), worker("b"), worker("c"), worker("z"))
print(table.concat(log, " "))

local closed = {}
local function resource(name)
  return setmetatable({ name = name }, { __close = function(r, err) closed[#closed + 1] = r.name .. (err and ("!" .. tostring(err)) or "") end })
end
local g = coroutine.create(function()
  local a <close> = resource("a")
  local b <close> = resource("b")
  coroutine.yield(1)
  error("boom", 0)
end)
print(coroutine.resume(g))
print(coroutine.resume(g))
print(table.concat(closed, ","), coroutine.status(g), coroutine.close(g))
local h = coroutine.create(function() local r <close> = resource("h"); coroutine.yield() end)
coroutine.resume(h)
print(coroutine.close(h), table.concat(closed, ","), coroutine.status(h))

local bad = coroutine.wrap(function() local t = nil; return t.field end)
print(pcall(bad))
local ok, e = pcall(coroutine.wrap(function() error({ code = 7 }) end))
print(ok, type(e), e.code)
local dead = coroutine.wrap(function() return 1 end)
dead()
print(pcall(dead))
print(coroutine.isyieldable(), coroutine.running() ~= nil, select("#", coroutine.running()))
print(coroutine.wrap(function() return coroutine.isyieldable(), coroutine.status(coroutine.running()) end)())
return output()
"##;

/// Numeric kernels from the classic benchmark programs, at small sizes,
/// and integer/float edge cases.
const NUMERIC: &str = r##"
local function bottom_up(depth)
  if depth == 0 then return {} end
  depth = depth - 1
  return { bottom_up(depth), bottom_up(depth) }
end
local function check(tree)
  if tree[1] then return 1 + check(tree[1]) + check(tree[2]) end
  return 1
end
for d = 4, 10, 2 do print("trees", d, check(bottom_up(d))) end

local function fannkuch(n)
  local perm, perm1, count = {}, {}, {}
  local maxflips, checksum, r, nperm = 0, 0, n, 0
  for i = 0, n - 1 do perm1[i] = i end
  while true do
    while r ~= 1 do count[r - 1] = r; r = r - 1 end
    for i = 0, n - 1 do perm[i] = perm1[i] end
    local flips = 0
    local k = perm[0]
    while k ~= 0 do
      local i, j = 0, k
      while i < j do perm[i], perm[j] = perm[j], perm[i]; i = i + 1; j = j - 1 end
      flips = flips + 1
      k = perm[0]
    end
    if flips > maxflips then maxflips = flips end
    checksum = checksum + (nperm % 2 == 0 and flips or -flips)
    while true do
      if r == n then return checksum, maxflips end
      local p0 = perm1[0]
      for i = 0, r - 1 do perm1[i] = perm1[i + 1] end
      perm1[r] = p0
      count[r] = count[r] - 1
      if count[r] > 0 then break end
      r = r + 1
    end
    nperm = nperm + 1
  end
end
print("fannkuch", fannkuch(7))

local function A(i, j) local ij = i + j - 1; return 1.0 / (ij * (ij - 1) * 0.5 + i) end
local function Av(x, y, N) for i = 1, N do local a = 0; for j = 1, N do a = a + x[j] * A(i, j) end; y[i] = a end end
local function Atv(x, y, N) for i = 1, N do local a = 0; for j = 1, N do a = a + x[j] * A(j, i) end; y[i] = a end end
local function AtAv(x, y, t, N) Av(x, t, N); Atv(t, y, N) end
local N, u, v, t = 50, {}, {}, {}
for i = 1, N do u[i] = 1 end
for _ = 1, 10 do AtAv(u, v, t, N); AtAv(v, u, t, N) end
local vBv, vv = 0, 0
for i = 1, N do local ui, vi = u[i], v[i]; vBv = vBv + ui * vi; vv = vv + vi * vi end
print("spectral", string.format("%0.9f", math.sqrt(vBv / vv)))

local sieve, primes = {}, {}
for i = 2, 2000 do
  if not sieve[i] then primes[#primes + 1] = i; for j = i * i, 2000, i do sieve[j] = true end end
end
print("primes", #primes, primes[#primes], table.concat(primes, ",", 1, 10))

local function gcd(a, b) while b ~= 0 do a, b = b, a % b end return a end
local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end
print("ints", gcd(1071, 462), fact(20), fact(21), fact(25.0), math.maxinteger + 1 == math.mininteger)
print("div", 7 // 2, -7 // 2, 7 % -3, -7 % 3, 7.5 // 2, -7.5 % 2, 1 // 0.0, -1 % math.huge, pcall(function() return 1 // 0 end))
print("float", 0.1 + 0.2, 1e15, 1e16, 2^53, 2^63, -2^63 == math.mininteger, 3 / 2, 4 / 2, 1e300 * 1e10, -0.0)
print("conv", math.tointeger(3.0), math.tointeger(3.5), 3 | 0, pcall(function() return 3.5 | 0 end))
print("str", "10" + 5, "3.5" * 2, 10 .. "", "0x10" + 0, pcall(function() return "abc" + 1 end))
print("fmt", string.format("%d %5.1f %e %g %g %g %a", 42, 3.14159, 12345.6789, 0.0001, 1e20, 100, 0.5))
print("math", math.floor(-3.5), math.ceil(-3.5), math.abs(math.mininteger), math.fmod(-7, 3), math.fmod(7, -3), math.max(1, 2.5, -1), math.min(3), math.ult(1, -1))
print("bits", 0xFF & 0x0F, 0xF0 | 0x0F, 0xFF ~ 0x0F, ~0, 1 << 62, 1 << 63, 1 << 64, -1 >> 60, 2^31 | 0)
print("cmp", 1 == 1.0, math.type(1), math.type(1.0), 1 < 1.5, "a" < "b", -0.0 == 0.0, 0/0 ~= 0/0, math.huge > math.maxinteger)
local acc = 0
for i = 10, 1, -3 do acc = acc + i end
for x = 0, 1, 0.25 do acc = acc + x end
print("loops", acc, pcall(function() for i = 1, 10, 0 do end end))
return output()
"##;

/// Traversal and table manipulation written by hand, as libraries do it:
/// `next` loops, proxies with `__index`/`__newindex`/`__len`/`__pairs`,
/// the table library on them, varargs and `goto continue`.
const TABLES: &str = r##"
local t = { 10, 20, 30, x = "a", y = "b" }
local n, k, v = 0, next(t)
while k ~= nil do n = n + 1; k, v = next(t, k) end
local last
for key in pairs(t) do last = key end
print(n, select("#", next(t, last)), next({}), select("#", next({})), rawequal(next(t), next(t)))

local function keys(tbl) local out = {} for key in pairs(tbl) do out[#out + 1] = tostring(key) end table.sort(out) return table.concat(out, ",") end
local sparse = {}
for i = 1, 50 do sparse[i * i] = i end
for i = 1, 50, 2 do sparse[i * i] = nil end
print(keys(sparse))
local cleared = {}
for i = 1, 200 do cleared["k" .. i] = i end
for key in pairs(cleared) do cleared[key] = nil end
print(next(cleared), #keys(cleared))

local function Proxy(backing)
  local log = {}
  local p = setmetatable({}, {
    __index = function(_, key) return backing[key] end,
    __newindex = function(_, key, value) log[#log + 1] = tostring(key) .. "=" .. tostring(value); backing[key] = value end,
    __len = function() return #backing end,
    __pairs = function() return next, backing, nil end,
  })
  return p, log
end
local p, log = Proxy({ "a", "b", "c" })
table.insert(p, "d")
table.insert(p, 1, "z")
print(table.remove(p), table.remove(p, 1), table.remove(p, #p + 1), #p)
print(table.concat(p, "+"), table.unpack(p))
print(table.concat(log, " "))
local calls = 0
table.sort(p, function(a, b) calls = calls + 1; return a > b end)
print(table.concat(p, ""), calls, table.concat(log, " "))
local q = table.move(p, 1, 3, 2, {})
print(q[1], q[2], q[4], select("#", table.unpack(q, 1, 4)))
local pk = {}
for key, value in pairs(p) do pk[#pk + 1] = key .. ":" .. value end
print(table.concat(pk, ","))
local seen = {}
for i, value in ipairs(p) do seen[#seen + 1] = i .. value end
print(table.concat(seen, ","))

local List = {}
List.__index = List
function List.new(...) return setmetatable(table.pack(...), List) end
function List:push(x) table.insert(self, x) return self end
function List:pop() return table.remove(self) end
function List:join(sep) return table.concat(self, sep) end
function List:sorted() local c = { table.unpack(self) } table.sort(c) return setmetatable(c, List) end
local l = List.new(5, 3, 8)
l:push(1):push(9)
print(l:join(","), l:pop(), l:sorted():join(" "), #l, l.n)
print(pcall(table.insert, l, 10, 0))
print(pcall(table.concat, List.new(1, {}, 3), ","))
print(table.unpack({ 1, nil, 3 }, 1, 3))
print(select("#", table.unpack({}, 1, 3)), select(-1, "a", "b"), select(2, "a", "b", "c"))

local function varsum(...)
  local s = 0
  for i = 1, select("#", ...) do s = s + (select(i, ...) or 0) end
  local packed = table.pack(...)
  return s, packed.n, ...
end
print(varsum(1, nil, 3, nil))
local odd = {}
for i = 1, 10 do
  if i % 2 == 0 then goto continue end
  odd[#odd + 1] = i
  ::continue::
end
print(table.concat(odd, ","))
local grid = {}
for r = 1, 3 do grid[r] = {} for c = 1, 3 do grid[r][c] = r * c end end
print(table.concat(grid[2], ","), #grid, table.concat(table.move(grid[3], 1, 3, 1, {}), ";"))
local weak = setmetatable({}, { __mode = "k" })
weak[{}] = 1
print(type(next(weak)) == "table" or next(weak) == nil)
return output()
"##;

/// Error handling: messages of runtime errors, levels, non-string error
/// values, `xpcall` handlers, `assert`, `error` rethrown through layers.
const ERRORS: &str = r##"
local function try(f, ...)
  local r = table.pack(pcall(f, ...))
  for i = 1, r.n do r[i] = type(r[i]) == "table" and ("table:" .. tostring(r[i].code)) or tostring(r[i]) end
  return table.concat(r, " | ", 1, r.n)
end
local cfg = {}
print(try(function() return cfg.section.key end))
print(try(function() return undefined_function() end))
print(try(function() local s = "x"; return s + 1 end))
print(try(function() return {} < {} end))
print(try(function() return 1 < "2" end))
print(try(function() return "a" .. {} end))
print(try(function() local n; return #n end))
print(try(function() cfg.method() end))
print(try(function() cfg:method() end))
print(try(function() return ("x"):bad() end))
print(try(function() return math.floor("abc") end))
print(try(function() return ("%d"):format("x") end))
print(try(function() return setmetatable({}, { __index = function(t, k) error("no field " .. k, 2) end }).missing end))
print(try(error, "plain"))
print(try(error, "no position", 0))
print(try(error, { code = 42 }))
print(try(error))
print(try(function() error("level 1") end))
print(try(function() local function inner() error("level 2", 2) end inner() end))
print(try(assert, false))
print(try(assert, nil, "assert message"))
print(try(assert, 1 == 1, "unused"))
print(try(function() assert(false, { code = 5 }) end))
print(xpcall(function() error("E") end, function(m) return "handled: " .. m end))
print(xpcall(function(a, b) return a + b end, function(m) return m end, 2, 3))
print(xpcall(function() error({ code = 1 }) end, function(e) return type(e) .. ":" .. e.code end))
print(xpcall(function() local x = nil; return x.y end, function(m) return (m:gsub("^eval:%d+: ", "")) end))
print(select("#", pcall(error)))
local function rethrow()
  local ok, err = pcall(error, "inner", 0)
  error("outer(" .. err .. ")", 0)
end
print(try(rethrow))
local depth = 0
local function nested(n) depth = depth + 1; if n == 0 then error("bottom", 0) end; local ok, e = pcall(nested, n - 1); error(e .. "<" .. n, 0) end
print(try(nested, 5), depth)
print(try(function() local t <close> = setmetatable({}, { __close = function() error("in close", 0) end }); return 1 end))
print(try(string.rep))
print(try(table.concat, { {} }))
print(try(tostring))
print(try(ipairs))
print(try(setmetatable, {}, {}, 1) == "true | table")
print(try(next, {}, "missing"))
print(try(string.char, 300))
print(try(utf8.char, -1))
print(try(function() for _ in utf8.codes("ok\xffno") do end end))
print(try(function() return table.unpack({}, 1, 1e7) end))
print(try(select, 0))
print(try(function() local a <const> = 1; return a + nil end))
return output()
"##;

/// Every program as (name, source without the prelude).
const PROGRAMS: &[(&str, &str)] = &[
    ("classes", CLASSES),
    ("json", JSON),
    ("strings", STRINGS),
    ("generators", GENERATORS),
    ("numeric", NUMERIC),
    ("tables", TABLES),
    ("errors", ERRORS),
];

/// What stock Lua 5.4.9 (the VM's release built without the metering
/// patch) returns for `source` named `=eval`.
fn reference(source: &str) -> String {
    quirl_lua_testkit::stock::run(source, "=eval")
        .unwrap_or_else(|e| panic!("the reference runs the program: {e}"))
}

#[test]
fn real_program_shapes_compute_what_lua_computes() {
    let mut mismatches = Vec::new();
    for (name, body) in PROGRAMS {
        let source = format!("{PRELUDE}{body}");
        let expected = reference(&source);
        // Every program prints a result line per check, so a program that
        // stopped early in the reference is caught here too.
        assert!(
            expected.lines().count() >= 10,
            "{name}: the reference printed too little:\n{expected}"
        );
        // A fresh VM per program: one program's globals or numbering of
        // objects cannot leak into the next.
        let mut vm = vm_with(DEFAULTS);
        let actual = success(eval(&mut vm, &source));
        if actual != serde_json::json!(expected) {
            let actual = actual.as_str().unwrap_or_default().to_owned();
            let first = expected
                .lines()
                .zip(actual.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
            mismatches.push(format!(
                "{name}: first difference at line {}\n  lua:     {:?}\n  sandbox: {:?}",
                first + 1,
                expected.lines().nth(first),
                actual.lines().nth(first)
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn real_programs_run_twice_in_one_vm_with_the_same_results() {
    // Charged wrappers keep per-VM state (traversal positions, object
    // numbers, coroutine generations); a second run of the same program in
    // the same VM must not see any of it.
    let mut vm = vm_with(DEFAULTS);
    for (name, body) in [PROGRAMS[3], PROGRAMS[5]] {
        let source = format!("{PRELUDE}{body}");
        let expected = serde_json::json!(reference(&source));
        for run in 1..=2 {
            assert_eq!(
                success(eval(&mut vm, &source)),
                expected,
                "{name}, run {run}"
            );
        }
    }
}
