local t0 = os.clock()
local a, b = string.rep('x', 1000) .. 'a', string.rep('x', 1000) .. 'b' local n = 0 for i = 1, 200000 do if a < b then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
