local t0 = os.clock()
local t = {} for i = 1, 100000 do t['k' .. i] = i end local s = 0 for r = 1, 10 do for k, v in pairs(t) do s = s + v end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
