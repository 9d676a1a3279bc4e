local t0 = os.clock()
local s = string.rep('a,bb,ccc,dddd,', 20000) local n = 0 for f in s:gmatch('[^,]+') do n = n + 1 end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
