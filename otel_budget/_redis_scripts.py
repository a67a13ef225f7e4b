"""Lua scripts of `RedisLedger`: each one is a single atomic decision on one scope.

Keys of a scope (all share the hash tag `{prefix:scope}`, so they live in one Redis Cluster slot):

- KEYS[1] `...:used`  hash: dim -> used in the current window; `_w` window index, `_len` window length (ms)
- KEYS[2] `...:held`  hash: dim -> sum of the live reservations
- KEYS[3] `...:res`   hash: reservation id -> its amounts ("dim value dim value ...")
- KEYS[4] `...:exp`   zset: reservation id -> deadline (ms since the epoch, Redis clock)
- KEYS[5] `...:done`  zset: settle id -> when to forget it (a retried settle is a no-op until then)

Amounts travel as decimal strings and are added with HINCRBYFLOAT, so no precision is lost in Lua numbers.
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

-- drop the reservations whose deadline passed (a crashed process never settles them)
local function purge(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, id in ipairs(gone) do
    local raw = redis.call('HGET', KEYS[3], id)
    if raw then
      for dim, v in string.gmatch(raw, '(%S+) (%S+)') do
        redis.call('HINCRBYFLOAT', KEYS[2], dim, '-' .. v)
      end
      redis.call('HDEL', KEYS[3], id)
    end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now) end
  if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
end

-- start the counters anew when the window changed; window_ms 0 means the one stored with the scope
local function roll(now, window_ms)
  if window_ms <= 0 then window_ms = num(redis.call('HGET', KEYS[1], '_len')) end
  if window_ms <= 0 then return end
  local w = string.format('%.0f', math.floor(now / window_ms))
  local cur = redis.call('HGET', KEYS[1], '_w')
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
#: Returns {"1"} when held, else {"0", dim, limit, used_or_reserved, requested}.
RESERVE = _COMMON + r"""
local id, ttl, window, idle = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6])
local now = now_ms()
purge(now)
roll(now, window)
if redis.call('HEXISTS', KEYS[3], id) == 1 then return {'1'} end
local limits = {}
for dim, v in string.gmatch(ARGV[5], '(%S+) (%S+)') do limits[dim] = tonumber(v) end
for dim, v in string.gmatch(ARGV[4], '(%S+) (%S+)') do
  local amount, limit = tonumber(v), limits[dim]
  if amount > 0 and limit then
    local taken = num(redis.call('HGET', KEYS[1], dim)) + math.max(0, num(redis.call('HGET', KEYS[2], dim)))
    if taken + amount > limit + 1e-9 * math.max(1, limit) then
      return {'0', dim, fmt(limit), fmt(taken), fmt(amount)}
    end
  end
end
for dim, v in string.gmatch(ARGV[4], '(%S+) (%S+)') do
  redis.call('HINCRBYFLOAT', KEYS[2], dim, v)
end
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
    for dim, v in string.gmatch(raw, '(%S+) (%S+)') do
      redis.call('HINCRBYFLOAT', KEYS[2], dim, '-' .. v)
    end
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
  end
end
purge(now)
roll(now, window)
for dim, v in string.gmatch(ARGV[4], '(%S+) (%S+)') do
  redis.call('HINCRBYFLOAT', KEYS[1], dim, v)
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZADD', KEYS[5], now + remember, sid)
redis.call('PEXPIRE', KEYS[5], remember)
keep(idle)
return '1'
"""

#: ARGV: dims... Returns {used_1, held_1, used_2, held_2, ...} in the order of the dims.
READ = _COMMON + r"""
local now = now_ms()
purge(now)
roll(now, 0)
local out = {}
for i = 1, #ARGV do
  out[#out + 1] = fmt(num(redis.call('HGET', KEYS[1], ARGV[i])))
  out[#out + 1] = fmt(math.max(0, num(redis.call('HGET', KEYS[2], ARGV[i]))))
end
return out
"""
