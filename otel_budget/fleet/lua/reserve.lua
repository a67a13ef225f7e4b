-- the definition in force: the tightest of every definition stored for the scope (recomputed when a new one comes)
local function define(def, now)
  local cap = redis.call('HGET', KEYS[6], '_cap')
  if redis.call('HSETNX', KEYS[6], def, string.format('%.0f', now)) == 0 and cap then return cap end
  local lim, raw, window, windowless = {}, {}, 0, false
  for _, d in ipairs(redis.call('HKEYS', KEYS[6])) do
    if d ~= '_cap' then
      local w = 0
      for dim, v in string.gmatch(d, '(%S+) (%S+)') do
        local x = tonumber(v)
        if dim == '_window' then w = x
        elseif lim[dim] == nil or x < lim[dim] then lim[dim], raw[dim] = x, v end
      end
      if w > window then window = w end
      if w == 0 then windowless = true end
    end
  end
  local dims = {}
  for dim in pairs(lim) do dims[#dims + 1] = dim end
  table.sort(dims)
  local parts = {}
  for _, dim in ipairs(dims) do parts[#parts + 1] = dim .. ' ' .. raw[dim] end
  if window > 0 and not windowless then parts[#parts + 1] = '_window ' .. string.format('%.0f', window) end
  cap = table.concat(parts, ' ')
  redis.call('HSET', KEYS[6], '_cap', cap)
  return cap
end

local id, ttl, idle, def = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[6]), ARGV[5]
local now = now_ms()
if redis.call('ZSCORE', KEYS[5], id) then return {'2'} end
local cap = define(def, now)
local limits, window = {}, 0
for dim, v in string.gmatch(cap, '(%S+) (%S+)') do
  if dim == '_window' then window = tonumber(v) else limits[dim] = tonumber(v) end
end
local function reply(out)
  if cap ~= def then out[#out + 1] = cap end
  return out
end
purge(now)
roll(now, window, true)
if redis.call('HEXISTS', KEYS[3], id) == 1 then return reply({'1'}) end
local dims, vals = parse(ARGV[4])
local asked, own = {}, {}
for i = 1, #dims do asked[dims[i]] = vals[i] end
for dim in string.gmatch(def, '(%S+) %S+') do own[dim] = true end
-- a dimension that only another definition limits: this call reserves nothing on it, but an exhausted cap refuses
for dim, limit in pairs(limits) do
  if not own[dim] and not ((asked[dim] or 0) > 0) then
    local taken = num(redis.call('HGET', KEYS[1], dim)) + math.max(0, num(redis.call('HGET', KEYS[2], dim)))
    if taken >= limit then return reply({'0', dim, fmt(limit), fmt(taken), fmt(0)}) end
  end
end
if #dims == 0 then return reply({'1'}) end
local used = redis.call('HMGET', KEYS[1], unpack(dims))
local held = redis.call('HMGET', KEYS[2], unpack(dims))
local args = {}
for i = 1, #dims do
  local amount, limit, h = vals[i], limits[dims[i]], num(held[i])
  if amount > 0 and limit then
    local taken = num(used[i]) + math.max(0, h)
    if taken + amount > limit + 1e-9 * math.max(1, limit) then
      return reply({'0', dims[i], fmt(limit), fmt(taken), fmt(amount)})
    end
  end
  args[#args + 1] = dims[i]
  args[#args + 1] = fmt(h + amount)
end
redis.call('HSET', KEYS[2], unpack(args))
redis.call('HSET', KEYS[3], id, ARGV[4])
redis.call('ZADD', KEYS[4], now + ttl, id)
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ttl + 60000) end
keep(idle)
return reply({'1'})
