-- Trusted Lua half of the pattern binding (SPEC §15.4). Runs once, before
-- the sandbox prelude, with the original string library. Installs
-- string.find, string.match, string.gmatch and string.gsub over the budgeted
-- Rust engine; the originals stay in upvalues and are only ever called with
-- arguments they reject before matching anything, to raise Lua's own
-- argument errors.
--
-- natives.find/match(...)        results | FAIL, message | FAIL, nil, args
-- natives.gmatch_start(...)      subject, pattern, offset | FAIL, nil, args
-- natives.gmatch_step(s,p,o,l)   end, captures... | nothing | FAIL, message
-- natives.gsub(...)              result, count | DRIVE, subject, pattern,
--                                max | FAIL, message | FAIL, nil, args
-- natives.gsub_step(s,p,o,l,f)   start, end, captures... (only the first
--                                when f) | nothing | FAIL, message
-- natives.charge_output(len)     charges a result built here
-- Offsets are 0-based; a last-match offset of -1 means none. "args" are
-- the guest's arguments up to the first bad one, for argument_error.

local natives, FAIL, DRIVE = ...

local error, type, select = error, type, select
local concat = table.concat
local sub, byte = string.sub, string.byte
-- Each original is called only from a local function of its own name, so
-- that Lua's argument errors name it as the guest did.
local originals = {}
do
  local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub
  originals.find = function(...) find(...) end
  originals.match = function(...) match(...) end
  originals.gmatch = function(...) gmatch(...) end
  originals.gsub = function(...) gsub(...) end
end
local native_find, native_match = natives.find, natives.match
local gmatch_start, gmatch_step = natives.gmatch_start, natives.gmatch_step
local native_gsub, gsub_step = natives.gsub, natives.gsub_step
local charge_output = natives.charge_output

-- Errors: the sandbox puts every function of the string table behind a
-- library call (library_call.rs), which rewrites an error positioned in
-- this chunk as Lua's C function would have raised it at the guest's call.
-- So the wrappers raise with error(message) (level 1, this chunk), and an
-- argument error is raised by the original function itself: it checks its
-- arguments in order before it matches anything, so called with the
-- guest's arguments up to the bad one (the engine returns them, count
-- intact) it raises Lua's own "bad argument" error, which the library call
-- renames and renumbers after the guest's call.
local function argument_error(name, ...)
  originals[name](...)
  error("pattern engine and Lua disagree about the arguments of '" .. name .. "'")
end

local function finish(name, first, ...)
  if first ~= FAIL then
    return first, ...
  end
  local message = ...
  if message == nil then
    argument_error(name, select(2, ...))
  end
  error(message)
end

string.find = function(...)
  return finish("find", native_find(...))
end

string.match = function(...)
  return finish("match", native_match(...))
end

string.gmatch = function(...)
  local subject, pattern, position = gmatch_start(...)
  if subject == FAIL then
    argument_error("gmatch", select(3, gmatch_start(...)))
  end
  local last = -1
  -- The iterator is not in a library table (no library call): its errors
  -- are raised at level 2, the loop that called it (advance is tail-called).
  local function advance(e, ...)
    if e == nil then
      return
    end
    if e == FAIL then
      error((...), 2)
    end
    position, last = e, e
    return ...
  end
  return function()
    return advance(gmatch_step(subject, pattern, position, last))
  end
end

local function call_replacement(repl, start, e, ...)
  if start == nil or start == FAIL then
    return start, e
  end
  return start, e, (repl(...))
end

local function index_replacement(repl, start, e, key)
  if start == nil or start == FAIL then
    return start, e
  end
  return start, e, repl[key]
end

string.gsub = function(...)
  local first, subject, pattern, max = native_gsub(...)
  if first == FAIL then
    if subject == nil then
      argument_error("gsub", select(3, native_gsub(...)))
    end
    error(subject)
  end
  if first ~= DRIVE then
    return first, subject
  end
  -- A table or function replacement: Lua's str_gsub loop, with the engine
  -- finding each match and the guest's code running here as ordinary Lua.
  local _, _, repl = ...
  local is_function = type(repl) == "function"
  local apply = is_function and call_replacement or index_replacement
  local anchor = byte(pattern, 1) == 94
  local parts, count, src, last, changed = {}, 0, 0, -1, false
  local size = 0
  while count < max do
    local start, e, value = apply(repl, gsub_step(subject, pattern, src, last, not is_function))
    if start == nil then
      break
    end
    if start == FAIL then
      error(e)
    end
    count = count + 1
    if start > src then
      size = size + 1
      parts[size] = sub(subject, src + 1, start)
    end
    if not value then
      value = sub(subject, start + 1, e)
    else
      local kind = type(value)
      if kind ~= "string" and kind ~= "number" then
        error("invalid replacement value (a " .. kind .. ")")
      end
      changed = true
    end
    size = size + 1
    parts[size] = value
    src, last = e, e
    if anchor then
      break
    end
  end
  if not changed then
    return subject, count
  end
  size = size + 1
  parts[size] = sub(subject, src + 1)
  local result = concat(parts)
  charge_output(#result)
  return result, count
end
