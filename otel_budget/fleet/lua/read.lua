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
