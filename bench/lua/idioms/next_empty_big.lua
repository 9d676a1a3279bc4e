local t0 = os.clock()
local t = {} for i = 1, 100000 do t['k' .. i] = i end local n = 0 for i = 1, 1000 do if next(t) then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
