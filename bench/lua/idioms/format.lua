local t0 = os.clock()
local t = {} for i = 1, 100000 do t[i] = string.format('%d:%s:%5.2f', i, 'x', i / 3) end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
