-- CPU- and allocation-bound: builds and walks many small trees.
local function make(depth)
  if depth == 0 then return {} end
  depth = depth - 1
  return { make(depth), make(depth) }
end

local function count(tree)
  if tree[1] == nil then return 1 end
  return 1 + count(tree[1]) + count(tree[2])
end

local max_depth = 14
local total = count(make(max_depth + 1))
local long_lived = make(max_depth)
for depth = 4, max_depth, 2 do
  local iterations = 1 << (max_depth - depth + 4)
  for _ = 1, iterations do
    total = total + count(make(depth))
  end
end
return total + count(long_lived)
