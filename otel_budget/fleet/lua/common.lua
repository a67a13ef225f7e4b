local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(x) return string.format('%.17g', x) end

local function num(x)
  if not x then return 0 end
  return tonumber(x) or 0
end

-- "dim v dim v" -> {dims}, {values}
local function parse(s)
  local dims, vals = {}, {}
  for dim, v in string.gmatch(s, '(%S+) (%S+)') do
    dims[#dims + 1] = dim
    vals[#vals + 1] = tonumber(v)
  end
  return dims, vals
end

-- hash[dim] += sign * value for every pair, in one HMGET and one HSET
local function add(key, dims, vals, sign)
  if #dims == 0 then return end
  local cur = redis.call('HMGET', key, unpack(dims))
  local args = {}
  for i = 1, #dims do
    args[#args + 1] = dims[i]
    args[#args + 1] = fmt(num(cur[i]) + sign * vals[i])
  end
  redis.call('HSET', key, unpack(args))
end

-- drop the reservations whose deadline passed (a crashed process never settles them)
local function purge(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  if #gone == 0 then return end
  for _, id in ipairs(gone) do
    local raw = redis.call('HGET', KEYS[3], id)
    if raw then
      local dims, vals = parse(raw)
      add(KEYS[2], dims, vals, -1)
      redis.call('HDEL', KEYS[3], id)
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
end

-- start the counters anew when the window changed. `fixed`: window_ms is the window in force (0: none, so a
-- stored window is dropped); otherwise window_ms 0 means the one stored with the scope. A window whose length
-- changed keeps the counters (a conflicting definition never starts them anew early).
local function roll(now, window_ms, fixed)
  local state = redis.call('HMGET', KEYS[1], '_w', '_len')
  local stored = num(state[2])
  if window_ms <= 0 then
    if fixed then
      if stored > 0 then
        redis.call('HDEL', KEYS[1], '_w', '_len')
        redis.call('PERSIST', KEYS[1])
      end
      return
    end
    window_ms = stored
  end
  if window_ms <= 0 then return end
  local w = string.format('%.0f', math.floor(now / window_ms))
  local cur = state[1]
  if cur and cur ~= w and stored == window_ms then redis.call('DEL', KEYS[1]) end
  if cur ~= w or stored ~= window_ms then
    redis.call('HSET', KEYS[1], '_w', w, '_len', string.format('%.0f', window_ms))
    redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', (tonumber(w) + 2) * window_ms))
  end
end

local function keep(idle_ms)
  if idle_ms > 0 then
    for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], idle_ms) end
  end
end
