-- Library-call heavy: a tokenizer on anchored string.find.
local parts = {}
for i = 1, 4000 do
  parts[#parts + 1] = "local name" .. i .. " = call(" .. i * 7 .. ", 'text " .. i .. "') -- note\n"
end
local text = table.concat(parts)
local rules = {
  { "^[%a_][%w_]*", "name" },
  { "^%d+", "number" },
  { "^'[^']*'", "string" },
  { "^%-%-[^\n]*", "comment" },
  { "^[=(),]", "punct" },
  { "^%s+", false },
}
local counts = {}
for _ = 1, 3 do
  local pos, len = 1, #text
  while pos <= len do
    local matched = false
    for r = 1, #rules do
      local rule = rules[r]
      local s, e = string.find(text, rule[1], pos)
      if s then
        if rule[2] then counts[rule[2]] = (counts[rule[2]] or 0) + 1 end
        pos = e + 1
        matched = true
        break
      end
    end
    if not matched then error("no token at " .. pos) end
  end
end
return counts.name .. " " .. counts.number .. " " .. counts.string .. " " .. counts.comment .. " " .. counts.punct
