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
-- settle(co)         charges coroutine co the instructions it ran since its
--                    count hook last fired, and resets its counter
-- as_library(f)      puts the Lua function f behind a library call (a C
--                    closure, see library_call.rs); the worker does this for
--                    every wrapper left in the library tables
-- caller_where()     luaL_where(L, 1) of the library call running this code
-- table_capacity(t)  slots of t's array part and hash part
-- native_next(c)     Lua's next as a C function that calls c(t, k, k2) to
--                    charge its scan of a table of more than 64 slots
--
-- Errors: every wrapper is called through a library call, which rewrites an
-- error positioned in this chunk as Lua's C library would have raised it at
-- the guest's call (SPEC §15.11). So a wrapper raises its own errors with
-- error(message, 1) and Lua's wording ("bad argument #N to 'name' (...)"),
-- and forwards its arguments with their count intact (`...`), so that a
-- missing argument stays "no value" rather than becoming nil.

local guard, charge, reserve_rep, plain_find, settle, as_library, caller_where, table_capacity,
  native_next = ...

local type, select, error, getmetatable, rawlen = type, select, error, getmetatable, rawlen
local tointeger = math.tointeger
local maxinteger = math.maxinteger
local raw_setmetatable = setmetatable

-- Native work below these sizes is covered by the instructions that call it
-- (SPEC §15.6): up to 64 elements, and bytes in units of 64.
local BIG_COUNT = 64

local function charge_bytes(n)
  if n >= 64 then charge(n // 64) end
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
    if type(handler) ~= "function" then
      return after(xpcall(...)) -- the original reports the argument error
    end
    -- Lua runs the message handler before unwinding, with hooks disabled
    -- when the error came from the count hook, so the handler must refuse
    -- to run after a stop (SPEC §15.8).
    local function msgh(...)
      guard()
      return handler(...)
    end
    return after(xpcall(f, msgh, select(3, ...)))
  end
end

---------------------------------------------------------------------------
-- Coroutines: every coroutine inherits the count hook. Control leaves a
-- coroutine only through resume (it yields, returns or fails) and close
-- (its __close handlers ran), and each time the coroutine is settled: it is
-- charged the instructions it ran since its hook last fired, so a coroutine
-- that dies between two firings costs exactly what it ran (SPEC §15.7).
---------------------------------------------------------------------------
do
  local create, resume, close, status = coroutine.create, coroutine.resume, coroutine.close, coroutine.status

  local function settled(co, ...)
    if type(co) == "thread" then
      settle(co)
    end
    return ...
  end

  coroutine.resume = function(...)
    return after(settled((...), resume(...)))
  end

  -- A stopped VM closes no coroutine: the coroutine's pending __close
  -- handlers would run in a thread whose hooks Lua may have left disabled
  -- when the stop was raised in it (SPEC §15.8).
  coroutine.close = function(...)
    guard()
    return after(settled((...), close(...)))
  end

  -- Mirrors lcorolib's auxwrap: close a coroutine that died in error, then
  -- propagate the error (with the caller's position prepended to string
  -- errors, as auxwrap's luaL_where(L, 1) does).
  local function finish(co, ok, ...)
    settle(co)
    guard()
    if ok then
      return ...
    end
    local err = ...
    if status(co) == "dead" then
      local closed, closing_error = close(co)
      settle(co)
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
    return as_library(function(...)
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
-- No heap addresses (SPEC §15.3): Lua prints functions, tables, threads and
-- userdata as "<kind>: 0x<address>", which would hand guest code the heap
-- layout that address-space randomisation hides. They print as
-- "<kind>: #<n>" instead, n a per-VM number given to each object the first
-- time it is printed: unique while the object lives, so tostring(t) still
-- works as a key. string.format's %s does the same and %p prints the number.
---------------------------------------------------------------------------
do
  local identity
  local raw_tostring, format, sub, byte = tostring, string.format, string.sub, string.byte
  local ids = raw_setmetatable({}, { __mode = "k" })
  local string_ids = {}
  local last_id = 0

  local function number_of(v)
    local id = ids[v]
    if id == nil then
      last_id = last_id + 1
      id = last_id
      ids[v] = id
    end
    return id
  end

  local referenced = { table = true, ["function"] = true, thread = true, userdata = true }

  -- "#<n>" for objects with an identity, nil for other values.
  identity = function(v)
    local t = type(v)
    if referenced[t] then
      return "#" .. number_of(v)
    elseif t == "string" then
      local id = string_ids[v]
      if id == nil then
        last_id = last_id + 1
        id = last_id
        string_ids[v] = id
      end
      return "#" .. id
    end
    return nil
  end

  -- The default form ends with the object's own address, exactly as %p
  -- prints it; a __tostring result is returned as it is.
  local function safe_tostring(v)
    local text = raw_tostring(v)
    if referenced[type(v)] then
      local address = format("%p", v)
      local n = #text - #address
      if n > 0 and sub(text, n + 1) == address then
        return sub(text, 1, n) .. "#" .. number_of(v)
      end
    end
    return text
  end

  _G.tostring = function(...)
    local v = ...
    local t = type(v)
    if t == "number" or t == "string" or t == "boolean" then
      local result = raw_tostring(v) -- no address to hide
      return result
    end
    if select("#", ...) == 0 then
      local result = raw_tostring(...) -- reports the missing argument
      return result
    end
    local result = safe_tostring((...))
    return result
  end

  -- Rewrite %s of objects and every %p; other conversions pass through.
  local function in_spec(b)
    return b ~= nil and (b == 45 or b == 43 or b == 32 or b == 35 or b == 46 or (b >= 48 and b <= 57))
  end
  local pack, unpack, concat = table.pack, table.unpack, table.concat
  string.format = function(...)
    local fmt = ...
    if type(fmt) ~= "string" or plain_find(fmt, "%", 1) == nil then
      local result = format(...)
      return result
    end
    -- The common call: a few arguments, none an object or a string of 64
    -- bytes or more, and no "p" in the format (so no %p): nothing to
    -- rewrite or charge here; the scan below costs a hundred instructions.
    local n = select("#", ...)
    if n <= 9 and plain_find(fmt, "p", 1) == nil then
      local simple = true
      for k = 2, n do
        local v = select(k, ...)
        local t = type(v)
        if referenced[t] or (t == "string" and #v >= 64) then
          simple = false
          break
        end
      end
      if simple then
        local result = format(...)
        return result
      end
    end
    local args = pack(select(2, ...))
    local parts, from, changed = {}, 1, false
    local i, arg, n = 1, 0, #fmt
    while true do
      local p = plain_find(fmt, "%", i)
      if p == nil then
        break
      end
      if byte(fmt, p + 1) == 37 then -- "%%"
        i = p + 2
      else
        local j = p + 1
        while j <= n and in_spec(byte(fmt, j)) do
          j = j + 1
        end
        arg = arg + 1
        local conversion = byte(fmt, j)
        if arg <= args.n then
          if conversion == 115 and referenced[type(args[arg])] then -- %s
            args[arg] = safe_tostring(args[arg])
            changed = true
          elseif conversion == 112 then -- %p becomes %s of the identity
            parts[#parts + 1] = sub(fmt, from, j - 1)
            parts[#parts + 1] = "s"
            from = j + 1
            args[arg] = identity(args[arg]) or "(null)"
            changed = true
          end
          if conversion == 115 and j > p + 1 and type(args[arg]) == "string" then
            -- %s with flags, width or precision: Lua measures the whole
            -- argument with strlen first and, with a precision, copies
            -- almost nothing, so the allocator charges nothing for the scan
            -- (SPEC §15.6).
            charge_bytes(#args[arg])
          end
        end
        i = j + 1
      end
    end
    if not changed then
      local result = format(...)
      return result
    end
    parts[#parts + 1] = sub(fmt, from)
    local result = format(concat(parts), unpack(args, 1, args.n))
    return result
  end
end

---------------------------------------------------------------------------
-- string: no bytecode, charged copies (patterns: pattern/strings.lua).
---------------------------------------------------------------------------
do
  local string = string
  local rep, byte, pack, unpack = string.rep, string.byte, string.pack, string.unpack
  local packsize = string.packsize

  string.dump = nil

  string.rep = function(...)
    if reserve_rep(...) then
      -- Empty string and separator with a positive count: the result is
      -- "", which Lua would build by looping n times (SPEC §15.6).
      local s, _, sep = ...
      local result = rep(s, 1, sep)
      return result
    end
    local result = rep(...)
    return result
  end

  -- string.sub, upper, lower and reverse stay Lua's own C functions, and
  -- string.format the address-hiding wrapper above: what they copy is
  -- charged by the allocator gate (one unit per 64 bytes, before the copy:
  -- a result longer than 40 bytes is a new allocation, upper, lower and
  -- reverse allocate their buffer before their loop above 1 KiB, and a
  -- format buffer grows before each piece is added; each format item is at
  -- most a few hundred bytes); below those sizes a call copies a bounded
  -- number of bytes, which the instructions calling it cover (SPEC §15.6).
  -- A Lua wrapper here charged the same bytes a second time and ran a dozen
  -- VM instructions per call, counted against the guest's budget.

  -- Formats are parsed option by option: one unit per format byte, charged
  -- before the parse (SPEC §15.6).
  local function charge_format(fmt)
    if type(fmt) == "string" then
      charge_count(#fmt)
    end
  end

  string.pack = function(...)
    charge_format((...))
    local result = pack(...)
    charge_bytes(#result)
    return result
  end

  string.packsize = function(...)
    charge_format((...))
    local result = packsize(...)
    return result
  end

  string.byte = function(...)
    return pass_counted(byte(...))
  end

  string.unpack = function(...)
    local fmt, data = ...
    charge_format(fmt)
    -- A "z" option measures its string with strlen, which finds no end in
    -- unterminated data before the data's end: nothing is allocated for the
    -- scan when the call then fails (SPEC §15.6).
    if type(fmt) == "string" and type(data) == "string" and plain_find(fmt, "z", 1) ~= nil then
      charge_bytes(#data)
    end
    return pass_counted(unpack(...))
  end
end

---------------------------------------------------------------------------
-- next and pairs: Lua 5.4's next walks empty slots one by one, so one call
-- on a large, mostly empty table is a long native scan (SPEC §15.6). The
-- array part is charged exactly (from the key's index to the returned
-- key's). A scan of the hash part is charged at the hash part's size once
-- per traversal: a call that continues a traversal (its key is the key the
-- previous call on that table returned) scans forward from where the last
-- one stopped, so the whole traversal scans each slot at most once. A
-- traversal that the guest breaks by adding keys makes Lua rehash, which
-- allocates (and is charged) at least as much as the rescan costs.
---------------------------------------------------------------------------
do
  local raw_next, raw_pairs = next, pairs
  local math_type = math.type
  local last_key = raw_setmetatable({}, { __mode = "k" })
  local hash_paid = raw_setmetatable({}, { __mode = "k" })

  local function array_index(k, array)
    if math_type(k) == "integer" and k >= 1 and k <= array then
      return k
    end
    return nil
  end

  -- Charges the scan of one call next(t, k) that returned k2 (nil at the
  -- end); the C function that does the call (traversal.rs) calls this only
  -- for tables of more than 64 slots.
  local function charge_scan(t, k, k2)
    local array, hash = table_capacity(t)
    local start = 0
    if k ~= nil then
      start = array_index(k, array)
    end
    local units = 0
    local in_hash = true
    if start ~= nil then
      local stop = array_index(k2, array)
      if stop ~= nil then
        units = stop - start
        in_hash = false
      else
        units = array - start
      end
    end
    local paid = k ~= nil and last_key[t] == k and hash_paid[t] == true
    if in_hash and not paid then
      units = units + hash
      paid = true
    end
    last_key[t] = k2
    hash_paid[t] = paid
    charge_count(units)
  end

  local charged_next = native_next(charge_scan)
  _G.next = charged_next
  _G.pairs = function(...)
    local f, s, c = raw_pairs(...)
    if f == raw_next then
      f = charged_next
    end
    return f, s, c
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

  -- The iterator skips continuation bytes one by one before decoding: a
  -- call on a run of them scans it. Charged by the distance it advanced.
  local codes = utf8.codes
  local function charged_step(step)
    return function(s, i)
      local j, code = step(s, i)
      if type(s) == "string" then
        local from = tointeger(i) or 0
        local to = j or #s
        if to > from then
          charge_bytes(to - from)
        end
      end
      if j == nil then
        return -- no results at the end, as Lua's iterator
      end
      return j, code
    end
  end
  local steps = raw_setmetatable({}, { __mode = "k" })
  utf8.codes = function(...)
    local step, s, i = codes(...)
    local charged = steps[step]
    if charged == nil then
      -- A library call, as the C iterator it replaces: an invalid byte
      -- sequence raises "invalid UTF-8 code" at the guest's loop, not here.
      charged = as_library(charged_step(step))
      steps[step] = charged
    end
    return charged, s, i
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

  -- Lua's length of a table with a metatable (luaL_len): __len's result
  -- must convert to an integer.
  local function length_of(t)
    local n = tointeger(#t)
    if n == nil then
      error("object length is not an integer", 1)
    end
    return n
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
    local t, pos, value = ...
    -- The common call: append to a plain table (no loop to charge).
    if value == nil and type(t) == "table" and getmetatable(t) == nil and select("#", ...) == 2 then
      insert(t, pos)
      return
    end
    local nargs = select("#", ...) - 1
    if type(t) ~= "table" or (nargs ~= 1 and nargs ~= 2) then
      insert(...) -- the original reports the argument error
      return
    end
    if nargs == 1 then
      if plain(t) then
        insert(t, pos)
      else
        t[length_of(t) + 1] = pos
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
    local e = length_of(t) + 1
    if not (p >= 1 and p <= e) then
      error("bad argument #2 to 'insert' (position out of bounds)", 1)
    end
    for i = e, p + 1, -1 do
      t[i] = t[i - 1]
    end
    t[p] = value
  end

  table.remove = function(...)
    local t, last = ...
    -- The common call: remove the last element of a plain table (no loop).
    if last == nil and type(t) == "table" and getmetatable(t) == nil then
      local result = remove(t)
      return result
    end
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
    local size = length_of(t)
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
    t[pos] = nil -- also at size + 1 (and 0 when empty), as Lua's tremove
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
    if i == nil and j == nil and type(t) == "table" and getmetatable(t) == nil then
      -- The common call: a whole plain array (up to 64 elements covered by
      -- the call itself, SPEC §15.6).
      charge_count(rawlen(t))
      local result = concat(t, sep)
      return result
    end
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
      last = length_of(t)
    end
    if first == nil or last == nil then
      local result = concat(...)
      return result
    end
    if plain(t) then
      -- Lua stops at the first element that is no string or number, so it
      -- visits at most one more element than the table holds: a range far
      -- beyond the table fails at once, as in Lua, instead of paying for
      -- the range (SPEC §15.6).
      local array, hash = table_capacity(t)
      local visited = span(first, last)
      if visited > array + hash then
        visited = array + hash + 1
      end
      charge(visited)
    else
      charge(span(first, last))
      t = plain_copy(t, first, last)
    end
    local result = concat(t, sep, first, last)
    return result
  end

  table.unpack = function(...)
    local t, i, j = ...
    if i == nil and j == nil and type(t) == "table" and getmetatable(t) == nil then
      -- The common call: a whole plain array (see table.concat).
      local n = rawlen(t)
      if n < 1000000 then
        charge_count(n)
        return unpack(t) -- cannot fail below Lua's stack limit
      end
    end
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
      last = length_of(t)
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

  local raw_pcall, raw_rawget = pcall, rawget

  -- Lua's auxsort (ltablib.c) step for step, over a table whose elements
  -- are read and written through its metamethods: the same reads, writes
  -- and comparisons in the same order. Each comparison is made by the
  -- original sort on a two-element probe, so the comparator (or `<`) runs
  -- called from C exactly as in Lua: its errors carry the same positions
  -- and it cannot yield. Lua draws a random pivot only after a badly
  -- unbalanced partition; a counter stands in for its clock-based seed.
  local pivot_seed = 0
  local function sort_through_metamethods(t, n, comp)
    local x, y, swapped
    local probe = raw_setmetatable({}, {
      __len = function() return 2 end,
      __index = function(_, k)
        if k == 1 then
          return y
        end
        return x
      end,
      __newindex = function() swapped = true end,
    })
    -- comp(a, b) (or a < b): the original sort swaps the probe's elements
    -- exactly when b, a is out of order.
    local function less(a, b)
      x, y, swapped = a, b, false
      sort(probe, comp)
      return swapped
    end
    local function auxsort(lo, up, rnd)
      while lo < up do
        local a_lo, a_up = t[lo], t[up]
        if less(a_up, a_lo) then
          t[lo] = a_up
          t[up] = a_lo
        end
        if up - lo == 1 then
          return
        end
        local p
        if up - lo < 100 or rnd == 0 then
          p = (lo + up) // 2
        else
          local r4 = (up - lo) // 4
          p = rnd % (r4 * 2) + (lo + r4)
        end
        local a_p, a_lo2 = t[p], t[lo]
        if less(a_p, a_lo2) then
          t[p] = a_lo2
          t[lo] = a_p
        else
          local a_up2 = t[up]
          if less(a_up2, a_p) then
            t[p] = a_up2
            t[up] = a_p
          end
        end
        if up - lo == 2 then
          return
        end
        local pivot = t[p]
        local a_before = t[up - 1]
        t[p] = a_before
        t[up - 1] = pivot
        local i, j = lo, up - 1
        while true do
          i = i + 1
          local a_i = t[i]
          while less(a_i, pivot) do
            if i == up - 1 then
              error("invalid order function for sorting", 1)
            end
            i = i + 1
            a_i = t[i]
          end
          j = j - 1
          local a_j = t[j]
          while less(pivot, a_j) do
            if j < i then
              error("invalid order function for sorting", 1)
            end
            j = j - 1
            a_j = t[j]
          end
          if j < i then
            t[up - 1] = a_i
            t[i] = pivot
            p = i
            break
          end
          t[i] = a_j
          t[j] = a_i
        end
        local smaller
        if p - lo < up - p then
          auxsort(lo, p - 1, rnd)
          smaller = p - lo
          lo = p + 1
        else
          auxsort(p + 1, up, rnd)
          smaller = up - p
          up = p - 1
        end
        if (up - lo) // 128 > smaller then
          pivot_seed = pivot_seed + 1
          rnd = pivot_seed
        end
      end
    end
    auxsort(1, n, 0)
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
    local n = length_of(t)
    if n <= 1 then
      return -- Lua reads nothing and checks no comparator
    end
    if n >= 2147483647 then
      error("bad argument #1 to 'sort' (array too big)", 1)
    end
    if comp ~= nil and type(comp) ~= "function" then
      sort({ 1, 2 }, comp) -- the original reports the argument error
    end
    charge(sort_units(n))
    -- Reads and writes of keys the table holds never reach a metamethod,
    -- so a table holding all of 1..n (an object with methods in its
    -- metatable) is sorted as a plain copy by Lua's own sort, and written
    -- back also when the comparator fails, as Lua leaves it half sorted.
    for k = 1, n do
      if raw_rawget(t, k) == nil then
        sort_through_metamethods(t, n, comp)
        return
      end
    end
    local copy = {}
    for k = 1, n do
      copy[k] = raw_rawget(t, k)
    end
    local ok, err = raw_pcall(sort, copy, comp)
    guard()
    for k = 1, n do
      t[k] = copy[k]
    end
    if not ok then
      error(err, 0)
    end
  end
end
