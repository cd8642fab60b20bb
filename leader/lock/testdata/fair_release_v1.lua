-- fair_release: release.lua for a fair lock, whose last release hands the
-- lock to the queue's head at once: it mints the head's term and holds the
-- lock for the head's call under the owner "CALL.0" (no attempt of a call
-- is numbered 0), and publishes the grant, so the head's wait ends without
-- another round trip (the head adopts "CALL.0" if it tries meanwhile).
-- Only a head that says it takes grants (its queue entry is "CALL!") is
-- granted; an older client's entry ("CALL") is woken by "released" as
-- before and takes the lock itself.
-- KEYS[1] lock hash, KEYS[2] term key, KEYS[3] queue, KEYS[4] slot
-- timeouts
-- ARGV[1] "TERM OWNER", ARGV[2] "1" for the caller's last hold of the
-- term, ARGV[3] channel, ARGV[4] TTL ms
-- Returns {n} as release.lua's n; {0, "TERM CALL.0"} released and granted.
if ARGV[2] ~= '1' then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return {-1}
  end
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n < 1 then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    n = 1
  end
  return {n}
end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return {-1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Drop waiters at the head whose slot timed out (as fair_acquire.lua).
local head = redis.call('LINDEX', KEYS[3], 0)
while head do
  local to = tonumber(redis.call('ZSCORE', KEYS[4], head))
  if to and to > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
if not head or string.sub(head, -1) ~= '!' then
  redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[1])
  return {0}
end
redis.call('LPOP', KEYS[3])
redis.call('ZREM', KEYS[4], head)
-- The term as acquire.lua mints it.
local term = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = tonumber(redis.call('SET', KEYS[2], string.format('%d', term), 'GET') or '0') or 0
if old >= term then
  term = old + 1
  redis.call('SET', KEYS[2], string.format('%d', term))
end
local field = string.format('%d', term) .. ' ' .. string.sub(head, 1, -2) .. '.0'
redis.call('HSET', KEYS[1], field, 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', ARGV[3], 'granted ' .. field)
return {0, field}
