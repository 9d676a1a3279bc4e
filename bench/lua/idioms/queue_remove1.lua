local t0 = os.clock()
local q = {} for i = 1, 20000 do q[i] = i end while #q > 0 do table.remove(q, 1) end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
