-- release: drop one hold of a term; delete the lock when none is left, and
-- tell the waiters.
-- KEYS[1] lock hash, KEYS[2] tombstones (acquire.lua's; the last release
-- of a field also leaves the field there for ARGV[4] ms)
-- ARGV[1] "TERM OWNER", ARGV[2] "1" when the caller's last hold of the
-- term goes (delete whatever the count: a re-entry whose reply was lost
-- may have counted one more), ARGV[3] channel, ARGV[4] ms the last
-- release's mark is kept (the lock's TTL: a client re-sends a request
-- within its call's bound)
-- Returns the holds left (0: deleted and announced, or already released
-- by this last release's first run; only the last hold deletes), -1 not
-- ours.
-- mark: remember for life ms that member's last release ran, so that the
-- same request run twice (a client re-sending it after a dropped
-- connection) answers as the first run did; expired marks are pruned.
local function mark(gone, member, life)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', gone, '-inf', now)
  redis.call('ZADD', gone, now + life, member)
  if redis.call('PTTL', gone) < life then
    redis.call('PEXPIRE', gone, life)
  end
end
if ARGV[2] == '1' then
  -- The hash has one field (the holder's): deleting it deletes the key.
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
    if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
      return 0
    end
    return -1
  end
  mark(KEYS[2], ARGV[1], tonumber(ARGV[4]))
else
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
  -- Not the caller's last hold: never delete. A release that ran twice
  -- (a client re-sending it after a dropped connection) would otherwise
  -- take the count to zero under the term's other live holds; the
  -- caller's own count decides which release is the last.
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n < 1 then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    n = 1
  end
  return n
end
redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[1])
return 0
