local t0 = os.clock()
local s = string.rep('h\u{e9}llo w\u{f6}rld ', 20000) local n = 0 for p, c in utf8.codes(s) do n = n + 1 end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
