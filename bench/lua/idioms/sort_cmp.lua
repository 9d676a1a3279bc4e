local t0 = os.clock()
local t = {} for i = 1, 100000 do t[i] = (i * 7919) % 100003 end table.sort(t, function(a, b) return a > b end)
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
