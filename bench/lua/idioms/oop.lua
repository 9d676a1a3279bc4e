local t0 = os.clock()
local P = {} P.__index = P function P.new(x) return setmetatable({x = x}, P) end function P:get() return self.x end local s = 0 for i = 1, 300000 do s = s + P.new(i):get() end
io.stderr:write(string.format('CPU %.6f\n', os.clock() - t0))
