-- Library-call heavy: a JSON encoder and decoder in Lua, round trip.
local encode
local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end
function encode(v, out)
  local kind = type(v)
  if kind == "table" then
    if #v > 0 then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = encode_string(k)
        out[#out + 1] = ":"
        encode(v[k], out)
      end
      out[#out + 1] = "}"
    end
  elseif kind == "string" then
    out[#out + 1] = encode_string(v)
  elseif kind == "number" then
    out[#out + 1] = string.format("%.14g", v)
  else
    out[#out + 1] = tostring(v)
  end
end

local decode_value
local function skip(s, i) return (string.find(s, "^[ \n\r\t]*", i)) and select(2, string.find(s, "^[ \n\r\t]*", i)) + 1 end
local function decode_string(s, i)
  local j = i + 1
  local parts = {}
  while true do
    local a, b = string.find(s, '^[^"\\]+', j)
    if a then parts[#parts + 1] = string.sub(s, a, b); j = b + 1 end
    local c = string.byte(s, j)
    if c == 34 then return table.concat(parts), j + 1 end
    local hex = string.sub(s, j + 2, j + 5)
    parts[#parts + 1] = string.char(tonumber(hex, 16))
    j = j + 6
  end
end
function decode_value(s, i)
  i = skip(s, i)
  local c = string.byte(s, i)
  if c == 123 then
    local t = {}
    i = skip(s, i + 1)
    if string.byte(s, i) == 125 then return t, i + 1 end
    while true do
      local k
      k, i = decode_string(s, skip(s, i))
      i = skip(s, i) + 1
      t[k], i = decode_value(s, i)
      i = skip(s, i)
      local d = string.byte(s, i)
      i = i + 1
      if d == 125 then return t, i end
    end
  elseif c == 91 then
    local t = {}
    i = skip(s, i + 1)
    if string.byte(s, i) == 93 then return t, i + 1 end
    while true do
      t[#t + 1], i = decode_value(s, i)
      i = skip(s, i)
      local d = string.byte(s, i)
      i = i + 1
      if d == 93 then return t, i end
    end
  elseif c == 34 then
    return decode_string(s, i)
  elseif string.find(s, "^true", i) then return true, i + 4
  elseif string.find(s, "^false", i) then return false, i + 5
  else
    local a, b = string.find(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    return tonumber(string.sub(s, a, b)), b + 1
  end
end

local data = {}
for i = 1, 600 do
  data[i] = { id = i, name = "item \"" .. i .. "\"", price = i * 1.25, tags = { "a", "b" .. i, "c" }, ok = i % 2 == 0 }
end
local text
for _ = 1, 6 do
  local out = {}
  encode(data, out)
  text = table.concat(out)
  data = decode_value(text, 1)
end
return #text .. " " .. data[600].name
