local t0 = os.clock()
local s = string.rep('{"a":123,"b":[1,2,3]}', 5000) local n = 0 for i = 1, #s do local b = s:byte(i) if b == 34 then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
