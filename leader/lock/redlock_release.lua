-- redlock release: release.lua on one Redlock master, which also raises the
-- master's term key to the hold's term (the highest of its quorum's) before
-- the lock can go, so that every later acquire on this master mints a
-- higher one.
-- KEYS[1] lock hash, KEYS[2] term key, KEYS[3] tombstones (as
-- release.lua's KEYS[2]); ARGV[1] "TERM OWNER" (this master's term),
-- ARGV[2] "1" when the caller's last hold goes, ARGV[3] channel, ARGV[4]
-- notice, ARGV[5] the hold's term, ARGV[6] ms the last release's mark is
-- kept (as release.lua)
-- Returns the holds left (0: deleted and announced, or already by this
-- last release's first run), -1 not ours.
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
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  if ARGV[2] == '1' and redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    return 0
  end
  return -1
end
local old = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if old < tonumber(ARGV[5]) then
  redis.call('SET', KEYS[2], ARGV[5])
end
if ARGV[2] ~= '1' then
  -- Not the caller's last hold: never delete (see release.lua: a release
  -- run twice must not free the lock under the term's other holds).
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n < 1 then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    n = 1
  end
  return n
end
redis.call('DEL', KEYS[1])
mark(KEYS[3], ARGV[1], tonumber(ARGV[6]))
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 0
