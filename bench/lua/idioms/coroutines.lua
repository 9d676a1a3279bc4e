local t0 = os.clock()
local co = coroutine.wrap(function() for i = 1, 200000 do coroutine.yield(i) end end) local s = 0 for i = 1, 200000 do s = s + co() end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
