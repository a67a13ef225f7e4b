"""Lua scripts of `RedisLedger`: each one is a single atomic decision on one scope.

Keys of a scope (all share the hash tag `{prefix:scope}`, so they live in one Redis Cluster slot):

- KEYS[1] `...:used`  hash: dim -> used in the current window; `_w` window index, `_len` window length (ms)
- KEYS[2] `...:held`  hash: dim -> sum of the live reservations
- KEYS[3] `...:res`   hash: reservation id -> its amounts ("dim value dim value ...")
- KEYS[4] `...:exp`   zset: reservation id -> deadline (ms since the epoch, Redis clock)
- KEYS[5] `...:done`  zset: settle id -> when to forget it (a retried settle is a no-op until then); a released
  reservation's id stays here too, as a tombstone, so a reserve that reaches Redis after its release holds nothing

Amounts travel as decimal strings (Python repr) and are stored with 17 significant digits, so a double survives
the round trip exactly; each hash is read with one HMGET and written with one HSET.
The Redis clock (TIME) decides expiry and windows, so clocks of the clients do not matter.
"""

from __future__ import annotations

_COMMON = r"""
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

-- start the counters anew when the window changed; window_ms 0 means the one stored with the scope
local function roll(now, window_ms)
  local state = redis.call('HMGET', KEYS[1], '_w', '_len')
  if window_ms <= 0 then window_ms = num(state[2]) end
  if window_ms <= 0 then return end
  local w = string.format('%.0f', math.floor(now / window_ms))
  local cur = state[1]
  if cur and cur ~= w then redis.call('DEL', KEYS[1]) end
  if cur ~= w then
    redis.call('HSET', KEYS[1], '_w', w, '_len', string.format('%.0f', window_ms))
    redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', (tonumber(w) + 2) * window_ms))
  end
end

local function keep(idle_ms)
  if idle_ms > 0 then
    for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], idle_ms) end
  end
end
"""

#: ARGV: id, ttl_ms, window_ms, amounts "dim v ...", limits "dim v ...", idle_ms.
#: Returns {"1"} when held, {"0", dim, limit, used_or_reserved, requested} when refused, {"2"} when the id was
#: already released (a reserve that arrived after its release).
RESERVE = _COMMON + r"""
local id, ttl, window, idle = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6])
local now = now_ms()
if redis.call('ZSCORE', KEYS[5], id) then return {'2'} end
purge(now)
if window > 0 then roll(now, window) end
if redis.call('HEXISTS', KEYS[3], id) == 1 then return {'1'} end
local dims, vals = parse(ARGV[4])
if #dims == 0 then return {'1'} end
local limits = {}
for dim, v in string.gmatch(ARGV[5], '(%S+) (%S+)') do limits[dim] = tonumber(v) end
local used = redis.call('HMGET', KEYS[1], unpack(dims))
local held = redis.call('HMGET', KEYS[2], unpack(dims))
local args = {}
for i = 1, #dims do
  local amount, limit, h = vals[i], limits[dims[i]], num(held[i])
  if amount > 0 and limit then
    local taken = num(used[i]) + math.max(0, h)
    if taken + amount > limit + 1e-9 * math.max(1, limit) then
      return {'0', dims[i], fmt(limit), fmt(taken), fmt(amount)}
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
return {'1'}
"""

#: ARGV: reservation id ("" for a plain charge), settle id, window_ms, actual "dim v ...", remember_ms, idle_ms.
#: Returns "1" when applied, "0" when this settle id was already applied (a retry).
SETTLE = _COMMON + r"""
local id, sid, window, remember, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
if redis.call('ZSCORE', KEYS[5], sid) then return '0' end
if id ~= '' then
  local raw = redis.call('HGET', KEYS[3], id)
  if raw then
    local dims, vals = parse(raw)
    add(KEYS[2], dims, vals, -1)
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
  end
end
purge(now)
roll(now, window)
local dims, vals = parse(ARGV[4])
add(KEYS[1], dims, vals, 1)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZADD', KEYS[5], now + remember, sid)
redis.call('PEXPIRE', KEYS[5], remember)
if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
keep(idle)
return '1'
"""

#: ARGV: dims... Returns {used_1, held_1, used_2, held_2, ...} in the order of the dims.
READ = _COMMON + r"""
local now = now_ms()
purge(now)
roll(now, 0)
local used = redis.call('HMGET', KEYS[1], unpack(ARGV))
local held = redis.call('HMGET', KEYS[2], unpack(ARGV))
local out = {}
for i = 1, #ARGV do
  out[#out + 1] = fmt(num(used[i]))
  out[#out + 1] = fmt(math.max(0, num(held[i])))
end
return out
"""
