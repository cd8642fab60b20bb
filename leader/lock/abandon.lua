-- abandon: end the attempts of a Lock call that may still land (their
-- outcome is unknown): each gets a tombstone, so that a request of theirs
-- still on its way is refused when it lands, and the lock is deleted if
-- one of them already took it (and the waiters told).
-- KEYS[1] lock hash, KEYS[2] tombstones (zset owner -> server ms when the
-- tombstone may go)
-- ARGV[1] channel, ARGV[2] tombstone lifetime in ms, ARGV[3..] owners
-- Returns 1 deleted, 0 not held by any of them (or absent).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[2], now + life, ARGV[i])
end
if #ARGV >= 3 then
  -- never shorter: another Mutex of the name (a longer TTL) may keep
  -- release marks and tombstones that must outlive this one
  if redis.call('PTTL', KEYS[2]) < life then
    redis.call('PEXPIRE', KEYS[2], life)
  end
end
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp then
    local o = string.sub(h[1], sp + 1)
    for i = 3, #ARGV do
      if o == ARGV[i] then
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[1], 'released ' .. h[1])
        return 1
      end
    end
  end
end
return 0
