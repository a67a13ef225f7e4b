"""Lua scripts of `RedisLedger`: each one is a single atomic decision on one scope.

Keys of a scope (all share the hash tag `{prefix:scope}`, so they live in one Redis Cluster slot):

- KEYS[1] `...:used`  hash: dim -> used in the current window; `_w` window index, `_len` window length (ms)
- KEYS[2] `...:held`  hash: dim -> sum of the live reservations
- KEYS[3] `...:res`   hash: reservation id -> its amounts ("dim value dim value ...")
- KEYS[4] `...:exp`   zset: reservation id -> deadline (ms since the epoch, Redis clock)
- KEYS[5] `...:done`  zset: settle id -> when to forget it (a retried settle is a no-op until then); a released
  reservation's id stays here too, as a tombstone, so a reserve that reaches Redis after its release holds nothing
- KEYS[6] `...:def`   hash: every distinct definition of the scope ("dim v ... [_window ms]") -> when first seen,
  and `_cap`: the definition in force, the tightest of them all (lowest value per dimension, longest window,
  no window when one definition has none)

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
"""

#: ARGV: id, ttl_ms, window_ms (unused: the window is part of the definition), amounts "dim v ...", the caller's
#: definition "dim v ... [_window ms]" (dims sorted), idle_ms.
#: Returns {"1"} when held, {"0", dim, limit, used_or_reserved, requested} when refused, {"2"} when the id was
#: already released (a reserve that arrived after its release). When the definition in force is not the
#: caller's, it is appended to the reply.
RESERVE = _COMMON + r"""
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
roll(now, window, false)
local dims, vals = parse(ARGV[4])
add(KEYS[1], dims, vals, 1)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZADD', KEYS[5], now + remember, sid)
redis.call('PEXPIRE', KEYS[5], remember)
if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
keep(idle)
return '1'
"""

#: ARGV: dims... Returns {used_1, held_1, used_2, held_2, ...} in the order of the dims, then the definition in
#: force ("" when none is stored) and every stored definition.
READ = _COMMON + r"""
local now = now_ms()
purge(now)
roll(now, 0, false)
local used = redis.call('HMGET', KEYS[1], unpack(ARGV))
local held = redis.call('HMGET', KEYS[2], unpack(ARGV))
local out = {}
for i = 1, #ARGV do
  out[#out + 1] = fmt(num(used[i]))
  out[#out + 1] = fmt(math.max(0, num(held[i])))
end
out[#out + 1] = redis.call('HGET', KEYS[6], '_cap') or ''
for _, d in ipairs(redis.call('HKEYS', KEYS[6])) do
  if d ~= '_cap' then out[#out + 1] = d end
end
return out
"""
