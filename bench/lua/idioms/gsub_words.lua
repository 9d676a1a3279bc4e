local t0 = os.clock()
local s = string.rep('hello world foo bar ', 20000) local n = 0 for i = 1, 5 do local r, c = s:gsub('%w+', string.upper) n = n + c end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
