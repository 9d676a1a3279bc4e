-- Trusted Lua half of the pattern binding (SPEC §15.4). Runs once, before
-- the sandbox prelude, with the original string library. Installs
-- string.find, string.match, string.gmatch and string.gsub over the budgeted
-- Rust engine; the originals stay in upvalues and are only ever called with
-- arguments they reject before matching anything, to raise Lua's exact
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

local error, type, pcall, select = error, type, pcall, select
local concat = table.concat
local sub, byte = string.sub, string.byte
local original_find = string.find
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

-- The original checks its arguments in order before it matches anything:
-- called with the guest's arguments up to the bad one (the engine returns
-- them), it raises Lua's own error. It is called through an upvalue of its
-- own name (Lua names the function after the call site), and the message
-- is raised again at the guest's position: level 3 from here is the caller
-- of the wrapper.
local function argument_error(name, ...)
  local ok, message = pcall(originals[name], ...)
  if not ok and type(message) == "string" and sub(message, 1, 8) == "sandbox:" then
    local at = original_find(message, ": ", 9, true)
    if at then
      message = sub(message, at + 2)
    end
  end
  error(message, 3)
end

-- Tail-called by the wrappers, so level 2 is the guest that called them.
local function finish(name, first, ...)
  if first ~= FAIL then
    return first, ...
  end
  local message = ...
  if message == nil then
    argument_error(name, select(2, ...))
  end
  error(message, 2)
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
  -- Tail-called by the iterator, so level 2 is the loop that called it.
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
    error(subject, 2)
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
      error(e, 2)
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
        error("invalid replacement value (a " .. kind .. ")", 2)
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
