local t0 = os.clock()
local t = {} for i = 1, 200000 do t[i] = i end local s = 0 for r = 1, 10 do for i, v in ipairs(t) do s = s + v end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
