-- redlock undo: end a failed Redlock attempt on one master, as abandon.lua
-- (a tombstone for the attempt's owner, so that its acquire, if it lands
-- later, is refused; the lock deleted if the attempt took it), but without
-- a release notice: the key was never a hold, and a notice would only wake
-- the other contenders into the same collision.
-- KEYS[1] lock hash, KEYS[2] tombstones; ARGV[1] tombstone lifetime in ms,
-- ARGV[2] owner
-- Returns 1 deleted, 0 not ours (or absent).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + life, ARGV[2])
-- never shorter: another Mutex of the name (a longer TTL) may keep
-- release marks and tombstones that must outlive this one
if redis.call('PTTL', KEYS[2]) < life then
  redis.call('PEXPIRE', KEYS[2], life)
end
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
end
return 0
