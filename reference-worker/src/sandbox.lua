-- Trusted sandbox prelude. Runs once, before any guest code, with the
-- original standard library. It replaces the library functions that can
-- catch a stop (pcall, xpcall, coroutine.resume/wrap/close) or do unbounded
-- native work (table loops, large copies) with wrappers. The
-- originals and the privileged helpers below live only in upvalues of the
-- wrappers; without the debug library guest code cannot reach them.
--
-- guard()            raises if the VM has stopped (sticky), otherwise nothing
-- charge(n)          charges n instruction units, raising on any budget trip
-- reserve_rep(s,n,p) checks string.rep's result size against the memory
--                    headroom and charges its copying
-- interval           instruction units charged per coroutine and request
-- as_library(f)      puts the Lua function f behind a library call (a C
--                    closure, see library_call.rs); the worker does this for
--                    every wrapper left in the library tables
-- caller_where()     luaL_where(L, 1) of the library call running this code
--
-- Errors: every wrapper is called through a library call, which rewrites an
-- error positioned in this chunk as Lua's C library would have raised it at
-- the guest's call (SPEC §15.11). So a wrapper raises its own errors with
-- error(message, 1) and Lua's wording ("bad argument #N to 'name' (...)"),
-- and forwards its arguments with their count intact (`...`), so that a
-- missing argument stays "no value" rather than becoming nil.

local guard, charge, reserve_rep, interval, as_library, caller_where = ...

local type, select, error, getmetatable, rawlen = type, select, error, getmetatable, rawlen
local tointeger = math.tointeger
local maxinteger = math.maxinteger
local raw_setmetatable = setmetatable

-- Native work below these sizes is covered by the instructions that call it.
local BIG_BYTES = 4096
local BIG_COUNT = 64

local function charge_bytes(n)
  if n > BIG_BYTES then charge(n // 64) end
end

local function charge_count(n)
  if n > BIG_COUNT then charge(n) end
end

local function pass_counted(...)
  charge_count(select("#", ...))
  return ...
end

local function after(...)
  guard()
  return ...
end

---------------------------------------------------------------------------
-- Protected calls: ordinary errors stay catchable, a stop never is.
---------------------------------------------------------------------------
do
  local pcall = pcall
  _G.pcall = function(...)
    return after(pcall(...))
  end
end

do
  local xpcall = xpcall
  _G.xpcall = function(...)
    local f, handler = ...
    if type(handler) == "function" then
      local function msgh(...)
        guard()
        return handler(...)
      end
      return after(xpcall(f, msgh, select(3, ...)))
    end
    return after(xpcall(...))
  end
end

---------------------------------------------------------------------------
-- Coroutines: every coroutine inherits the count hook; a coroutine is
-- charged one interval the first time it runs in a request, which covers
-- the instructions its own hook counter may hold.
---------------------------------------------------------------------------
local generation = 0
local charged = raw_setmetatable({}, { __mode = "k" })

local function charge_thread(co)
  if type(co) == "thread" and charged[co] ~= generation then
    charged[co] = generation
    charge(interval)
  end
end

do
  local create, resume, close, status = coroutine.create, coroutine.resume, coroutine.close, coroutine.status

  coroutine.create = function(...)
    local co = create(...)
    charge_thread(co)
    return co
  end

  coroutine.resume = function(...)
    charge_thread((...))
    return after(resume(...))
  end

  coroutine.close = function(...)
    return after(close(...))
  end

  -- Mirrors lcorolib's auxwrap: close a coroutine that died in error, then
  -- propagate the error (with the caller's position prepended to string
  -- errors, as auxwrap's luaL_where(L, 1) does).
  local function finish(co, ok, ...)
    guard()
    if ok then
      return ...
    end
    local err = ...
    if status(co) == "dead" then
      local closed, closing_error = close(co)
      guard()
      if not closed then
        err = closing_error
      end
    end
    if type(err) == "string" then
      err = caller_where() .. err
    end
    error(err, 0)
  end

  coroutine.wrap = function(...)
    local co = create(...)
    charge_thread(co)
    return as_library(function(...)
      charge_thread(co)
      return finish(co, resume(co, ...))
    end)
  end
end

---------------------------------------------------------------------------
-- Base library restrictions.
---------------------------------------------------------------------------
do
  local setmetatable, rawget = setmetatable, rawget
  _G.setmetatable = function(...)
    -- Lua marks an object for finalization only if its metatable has a raw
    -- __gc field when setmetatable is called, so this check is complete.
    local t, mt = ...
    if type(t) == "table" and type(mt) == "table" and rawget(mt, "__gc") ~= nil then
      error("setmetatable: __gc finalizers are not available in the sandbox", 1)
    end
    local result = setmetatable(...)
    return result
  end
end

-- collectgarbage: "collect" (the default), "step", "isrunning" and "count".
-- A collection or step traverses at most the whole heap, so it is charged
-- like copying the heap once (one unit per 64 bytes in use). The options
-- that stop the collector or change its mode or tuning stay refused: the
-- collector's state belongs to the worker (SPEC §15.3).
do
  local collectgarbage = collectgarbage
  local refused = {
    stop = true, restart = true, incremental = true, generational = true,
    setpause = true, setstepmul = true,
  }
  _G.collectgarbage = function(...)
    local option = ...
    if option == nil or option == "collect" or option == "step" then
      local kbytes = collectgarbage("count")
      charge(tointeger(kbytes // 1) * 16)
    elseif type(option) == "string" and refused[option] then
      error('collectgarbage: option "' .. option .. '" is not available in the sandbox; '
        .. 'only "collect", "step", "isrunning" and "count" are', 1)
    end
    return collectgarbage(...)
  end
end

do
  local tonumber = tonumber
  _G.tonumber = function(...)
    local value = ...
    if type(value) == "string" then
      charge_bytes(#value)
    end
    local result = tonumber(...)
    return result
  end
end

---------------------------------------------------------------------------
-- string: no bytecode, charged copies (patterns: pattern/strings.lua).
---------------------------------------------------------------------------
do
  local string = string
  local rep, upper, lower, reverse, sub, format, byte, pack, unpack =
    string.rep, string.upper, string.lower, string.reverse,
    string.sub, string.format, string.byte, string.pack, string.unpack

  string.dump = nil

  string.rep = function(...)
    reserve_rep(...)
    local result = rep(...)
    return result
  end

  local function charged_transform(original)
    return function(...)
      local s = ...
      if type(s) == "string" then
        charge_bytes(#s)
      end
      local result = original(...)
      return result
    end
  end
  string.upper = charged_transform(upper)
  string.lower = charged_transform(lower)
  string.reverse = charged_transform(reverse)

  string.sub = function(...)
    local result = sub(...)
    charge_bytes(#result)
    return result
  end

  string.format = function(...)
    local result = format(...)
    charge_bytes(#result)
    return result
  end

  string.pack = function(...)
    local result = pack(...)
    charge_bytes(#result)
    return result
  end

  string.byte = function(...)
    return pass_counted(byte(...))
  end

  string.unpack = function(...)
    return pass_counted(unpack(...))
  end
end

---------------------------------------------------------------------------
-- utf8: charged scans.
---------------------------------------------------------------------------
do
  local len, offset, codepoint = utf8.len, utf8.offset, utf8.codepoint

  utf8.len = function(...)
    local s = ...
    if type(s) == "string" then
      charge_bytes(#s)
    end
    return pass_counted(len(...))
  end

  utf8.offset = function(...)
    local s = ...
    if type(s) == "string" then
      charge_bytes(#s)
    end
    local result = offset(...)
    return result
  end

  utf8.codepoint = function(...)
    return pass_counted(codepoint(...))
  end
end

---------------------------------------------------------------------------
-- table: native loops only over plain tables with their trip count charged
-- first; tables with metatables are handled by hooked Lua loops, so a lying
-- __len or an __index chain can never drive a native loop.
---------------------------------------------------------------------------
do
  local table = table
  local concat, insert, move, remove, sort, unpack =
    table.concat, table.insert, table.move, table.remove, table.sort, table.unpack

  local function plain(t)
    return type(t) == "table" and getmetatable(t) == nil
  end

  local function span(first, last)
    if last < first then
      return 0
    end
    local n = last - first
    if n < 0 then -- overflow: the original rejects such ranges
      return maxinteger
    end
    return n + 1
  end

  table.move = function(...)
    local a1, f, e, t, a2 = ...
    local tt = a2
    if tt == nil then
      tt = a1
    end
    local fi, ei, ti = tointeger(f), tointeger(e), tointeger(t)
    if fi == nil or ei == nil or ti == nil or type(a1) ~= "table" or type(tt) ~= "table" then
      local result = move(...)
      return result
    end
    if ei >= fi then
      if not (fi > 0 or ei < maxinteger + fi) then
        error("bad argument #3 to 'move' (too many elements to move)", 1)
      end
      if not (ti <= maxinteger - (ei - fi)) then
        error("bad argument #4 to 'move' (destination wrap around)", 1)
      end
    end
    if plain(a1) and plain(tt) then
      charge(span(fi, ei))
      local result = move(a1, fi, ei, ti, tt)
      return result
    end
    if ei >= fi then
      local n = ei - fi
      if ti > ei or ti <= fi or tt ~= a1 then
        for i = 0, n do
          tt[ti + i] = a1[fi + i]
        end
      else
        for i = n, 0, -1 do
          tt[ti + i] = a1[fi + i]
        end
      end
    end
    return tt
  end

  table.insert = function(...)
    local nargs = select("#", ...) - 1
    local t, pos, value = ...
    if type(t) ~= "table" or (nargs ~= 1 and nargs ~= 2) then
      insert(...) -- the original reports the argument error
      return
    end
    if nargs == 1 then
      if plain(t) then
        insert(t, pos)
      else
        t[#t + 1] = pos
      end
      return
    end
    local p = tointeger(pos)
    if p == nil then
      insert(t, pos, value)
      return
    end
    if plain(t) then
      local e = rawlen(t) + 1
      if p >= 1 and p <= e then
        charge(e - p)
      end
      insert(t, p, value)
      return
    end
    local e = #t + 1
    if not (p >= 1 and p <= e) then
      error("bad argument #2 to 'insert' (position out of bounds)", 1)
    end
    for i = e, p + 1, -1 do
      t[i] = t[i - 1]
    end
    t[p] = value
  end

  table.remove = function(...)
    local t = ...
    if plain(t) then
      local size = rawlen(t)
      local pos = size
      local given = select(2, ...)
      if select("#", ...) > 1 and given ~= nil then
        pos = tointeger(given)
      end
      if pos ~= nil and pos >= 1 and pos < size then
        charge(size - pos)
      end
      local result = remove(...)
      return result
    end
    if type(t) ~= "table" then
      local result = remove(...)
      return result
    end
    local size = #t
    local pos = size
    local given = select(2, ...)
    if select("#", ...) > 1 and given ~= nil then
      pos = tointeger(given)
      if pos == nil then
        local result = remove({}, select(2, ...)) -- reports the argument error
        return result
      end
    end
    if pos ~= size and not (pos >= 1 and pos <= size + 1) then
      error("bad argument #2 to 'remove' (position out of bounds)", 1)
    end
    local value = t[pos]
    while pos < size do
      t[pos] = t[pos + 1]
      pos = pos + 1
    end
    if pos <= size then
      t[pos] = nil
    end
    return value
  end

  -- Copy t[first..last] into a plain table through ordinary (hooked) Lua
  -- indexing, so metamethods run under the budget.
  local function plain_copy(t, first, last)
    local copy = {}
    for i = first, last do
      copy[i] = t[i]
    end
    return copy
  end

  table.concat = function(...)
    local t, sep, i, j = ...
    if type(t) ~= "table" then
      local result = concat(...)
      return result
    end
    local first, last = 1, nil
    if i ~= nil then
      first = tointeger(i)
    end
    if j ~= nil then
      last = tointeger(j)
    elseif plain(t) then
      last = rawlen(t)
    else
      last = #t
    end
    if first == nil or last == nil then
      local result = concat(...)
      return result
    end
    charge(span(first, last))
    if not plain(t) then
      t = plain_copy(t, first, last)
    end
    local result = concat(t, sep, first, last)
    return result
  end

  table.unpack = function(...)
    local t, i, j = ...
    if type(t) ~= "table" then
      return pass_counted(unpack(...))
    end
    local first, last = 1, nil
    if i ~= nil then
      first = tointeger(i)
    end
    if j ~= nil then
      last = tointeger(j)
    elseif plain(t) then
      last = rawlen(t)
    else
      last = #t
    end
    if first == nil or last == nil then
      return pass_counted(unpack(...))
    end
    local n = span(first, last)
    if n >= 1000000 then
      error("too many results to unpack", 1)
    end
    charge(n)
    if not plain(t) then
      t = plain_copy(t, first, last)
    end
    return unpack(t, first, last) -- arguments already checked and charged
  end

  local function sort_units(n)
    local log = 1
    local m = n
    while m > 1 do
      m = m // 2
      log = log + 1
    end
    return n * log
  end

  table.sort = function(...)
    local t, comp = ...
    if type(t) ~= "table" then
      sort(...)
      return
    end
    if plain(t) then
      charge(sort_units(rawlen(t)))
      sort(t, comp)
      return
    end
    local n = #t
    if n >= 2147483647 then
      error("bad argument #1 to 'sort' (array too big)", 1)
    end
    charge(sort_units(n))
    local copy = plain_copy(t, 1, n)
    sort(copy, comp)
    for k = 1, n do
      t[k] = copy[k]
    end
  end
end

-- Called by the worker at the start of every budget window.
return function()
  generation = generation + 1
end
