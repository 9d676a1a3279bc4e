local t0 = os.clock()
local function f(...) return select('#', ...) end local n = 0 for i = 1, 200000 do n = n + f(1, 2, 3, 4, 5) end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
