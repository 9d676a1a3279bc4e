-- CPU-bound: floating point and table fields.
local pi = math.pi
local solar_mass = 4 * pi * pi
local days = 365.24
local bodies = {
  { x = 0, y = 0, z = 0, vx = 0, vy = 0, vz = 0, mass = solar_mass },
  { x = 4.84, y = -1.16, z = -0.10, vx = 0.00166 * days, vy = 0.00770 * days,
    vz = -0.0000690 * days, mass = 0.000954 * solar_mass },
  { x = 8.34, y = 4.12, z = -0.40, vx = -0.00276 * days, vy = 0.00499 * days,
    vz = 0.0000230 * days, mass = 0.000285 * solar_mass },
  { x = 12.89, y = -15.11, z = -0.22, vx = 0.00296 * days, vy = 0.00237 * days,
    vz = -0.0000296 * days, mass = 0.0000436 * solar_mass },
  { x = 15.38, y = -25.92, z = 0.18, vx = 0.00268 * days, vy = 0.00163 * days,
    vz = -0.0000951 * days, mass = 0.0000515 * solar_mass },
}
local n = #bodies

local function energy()
  local e = 0
  for i = 1, n do
    local b = bodies[i]
    e = e + 0.5 * b.mass * (b.vx * b.vx + b.vy * b.vy + b.vz * b.vz)
    for j = i + 1, n do
      local c = bodies[j]
      local dx, dy, dz = b.x - c.x, b.y - c.y, b.z - c.z
      e = e - b.mass * c.mass / math.sqrt(dx * dx + dy * dy + dz * dz)
    end
  end
  return e
end

local function advance(dt)
  for i = 1, n do
    local b = bodies[i]
    local bx, by, bz, bm = b.x, b.y, b.z, b.mass
    local vx, vy, vz = b.vx, b.vy, b.vz
    for j = i + 1, n do
      local c = bodies[j]
      local dx, dy, dz = bx - c.x, by - c.y, bz - c.z
      local d2 = dx * dx + dy * dy + dz * dz
      local mag = dt / (d2 * math.sqrt(d2))
      local cm = c.mass * mag
      vx, vy, vz = vx - dx * cm, vy - dy * cm, vz - dz * cm
      cm = bm * mag
      c.vx, c.vy, c.vz = c.vx + dx * cm, c.vy + dy * cm, c.vz + dz * cm
    end
    b.vx, b.vy, b.vz = vx, vy, vz
    b.x, b.y, b.z = bx + dt * vx, by + dt * vy, bz + dt * vz
  end
end

local before = energy()
for _ = 1, 150000 do advance(0.01) end
return string.format("%.9f %.9f", before, energy())
