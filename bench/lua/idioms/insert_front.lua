local t0 = os.clock()
local q = {} for i = 1, 20000 do table.insert(q, 1, i) end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
