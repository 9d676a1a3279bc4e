-- CPU-bound: nested loops over float arrays.
local function a(i, j)
  local ij = i + j - 1
  return 1.0 / (ij * (ij - 1) * 0.5 + i)
end

local function times(x, y, n)
  for i = 1, n do
    local s = 0
    for j = 1, n do s = s + a(i, j) * x[j] end
    y[i] = s
  end
end

local function times_transposed(x, y, n)
  for i = 1, n do
    local s = 0
    for j = 1, n do s = s + a(j, i) * x[j] end
    y[i] = s
  end
end

local function both(x, y, t, n)
  times(x, t, n)
  times_transposed(t, y, n)
end

local n = 200
local u, v, t = {}, {}, {}
for i = 1, n do u[i] = 1 end
for _ = 1, 10 do
  both(u, v, t, n)
  both(v, u, t, n)
end
local vbv, vv = 0, 0
for i = 1, n do
  local ui, vi = u[i], v[i]
  vbv, vv = vbv + ui * vi, vv + vi * vi
end
return string.format("%0.9f", math.sqrt(vbv / vv))
