local t0 = os.clock()
local s = string.rep('abcdefghij', 20000) local n = 0 for i = 1, #s - 3 do if s:sub(i, i + 2) == 'cde' then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
