local t0 = os.clock()
local s = string.rep('abc', 10000) .. 'needle' local n = 0 for i = 1, 2000 do if s:find('needle', 1, true) then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
