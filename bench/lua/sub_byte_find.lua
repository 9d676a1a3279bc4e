-- Library-call heavy: 10^6 calls each of string.sub, string.byte and plain string.find.
local s = string.rep("abcdefghij", 20) .. "x"
local len = #s - 4
local total = 0
for i = 1, 1000000 do
  local p = i % len + 1
  total = total + #string.sub(s, p, p + 3) + string.byte(s, p) + string.find(s, "x", p, true)
end
return total
