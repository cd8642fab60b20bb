-- fair_abandon: abandon.lua for a fair lock: the call also leaves the
-- queue, and the waiters are woken when the lock is free (the next head
-- may take it).
-- KEYS[1] lock hash, KEYS[2] tombstones, KEYS[3] queue, KEYS[4] slot
-- timeouts
-- ARGV[1] channel, ARGV[2] tombstone lifetime in ms, ARGV[3] the call,
-- ARGV[4..] owners of its attempts that may still land
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[2], now + life, ARGV[i])
end
if #ARGV >= 4 then
  -- never shorter: another Mutex of the name (a longer TTL) may keep
  -- release marks and tombstones that must outlive this one
  if redis.call('PTTL', KEYS[2]) < life then
    redis.call('PEXPIRE', KEYS[2], life)
  end
end
redis.call('LREM', KEYS[3], 0, ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[3])
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp then
    local o = string.sub(h[1], sp + 1)
    for i = 4, #ARGV do
      if o == ARGV[i] then
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[1], 'released ' .. h[1])
        return 1
      end
    end
  end
  return 0
end
redis.call('PUBLISH', ARGV[1], 'left ' .. ARGV[3])
return 0
