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
