local t0 = os.clock()
local t = {1,2,3,4,5,6,7,8,9,10} local n = 0 for i = 1, 200000 do n = n + select('#', table.unpack(t)) end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
