local t0 = os.clock()
local f = 0 for i = 1, 300000 do local g = function() return i end f = f + g() end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
