-- redlock release by owner: the last release on a Redlock master whose
-- acquire was never confirmed (its reply came after the quorum's): delete
-- the lock if exactly this owner holds it (owners are unique per
-- attempt), raise the master's term key to the hold's term first, and tell
-- the waiters. The owner gets a tombstone (as abandon.lua gives one), so
-- that its acquire, if it is still on its way, takes nothing when it lands
-- after the hold's end.
-- KEYS[1] lock hash, KEYS[2] term key, KEYS[3] tombstones; ARGV[1] owner,
-- ARGV[2] channel, ARGV[3] the hold's term, ARGV[4] tombstone lifetime ms
-- Returns 0 deleted and announced (or already by this request's first
-- run: it leaves "released OWNER" beside the tombstone), -1 not held by
-- owner.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZADD', KEYS[3], now + life, ARGV[1])
-- never shorter: another Mutex of the name (a longer TTL) may keep
-- release marks and tombstones that must outlive this one
if redis.call('PTTL', KEYS[3]) < life then
  redis.call('PEXPIRE', KEYS[3], life)
end
local done = 'released ' .. ARGV[1]
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[1] then
    local old = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    if old < tonumber(ARGV[3]) then
      redis.call('SET', KEYS[2], ARGV[3])
    end
    redis.call('DEL', KEYS[1])
    redis.call('ZADD', KEYS[3], now + life, done)
    redis.call('PUBLISH', ARGV[2], 'released ' .. h[1])
    return 0
  end
end
if redis.call('ZSCORE', KEYS[3], done) then
  return 0
end
return -1
