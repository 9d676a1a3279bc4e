local t0 = os.clock()
local t = {} for i = 1, 200000 do t[#t+1] = tostring(i) end local s = table.concat(t, ',')
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
