local t0 = os.clock()
local n = 0 for i = 1, 100000 do local ok = pcall(error, 'x') if not ok then n = n + 1 end end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
