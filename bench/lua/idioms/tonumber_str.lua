local t0 = os.clock()
local n = 0 for i = 1, 200000 do n = n + tonumber('12345') end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
