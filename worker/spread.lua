-- Heartbeat of one member of a spread worker group, one round trip.
-- KEYS[1] PREFIX:{GROUP}:members  ZSET member -> expiry (server ms)
-- KEYS[2] PREFIX:{GROUP}:loads    HASH member -> jobs it holds
-- ARGV[1] member ID; ARGV[2] member TTL in ms (0: leave the group);
-- ARGV[3] the member's load; ARGV[4] idle expiry of both keys in ms;
-- ARGV[5] the group's notice channel.
-- Prunes the members whose expiry passed (server time), then returns
-- {member, load, member, load, ...} of the live ones (the caller sorts).
-- When the membership changed (a member joined, left or was pruned) it
-- publishes "elected 0 MEMBER" (joined) or "released 0 MEMBER" (gone) on
-- the channel, in the election notices' format, so the other members
-- rebalance at once instead of at their next heartbeat.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('PUBLISH', ARGV[5], 'released 0 ' .. gone[1])
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'elected 0 ' .. ARGV[1])
  end
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'released 0 ' .. ARGV[1])
  end
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if #members == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {}
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local out = {}
for _, m in ipairs(members) do
  out[#out + 1] = m
  out[#out + 1] = redis.call('HGET', KEYS[2], m) or '0'
end
return out
