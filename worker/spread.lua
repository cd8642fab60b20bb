-- Heartbeat of one member of a spread worker group, one round trip.
-- KEYS[1] PREFIX:{GROUP}:members  ZSET member -> expiry (server ms)
-- KEYS[2] PREFIX:{GROUP}:loads    HASH member -> jobs it holds
-- KEYS[3] PREFIX:{GROUP}:lease    the lease of the election GROUP (mode elect)
-- KEYS[4] PREFIX:{GROUP}:spread   ZSET member -> server ms until which the
--         member may still run a job of the group (exclusion of mode elect)
-- KEYS[5] PREFIX:{GROUP}:state    HASH member -> "DIGEST JOB JOB ..." (the
--         digest of the jobs it registered, then the jobs it holds)
-- KEYS[6] PREFIX:{GROUP}:jobsets  HASH digest -> "JOB JOB ..." (registered)
-- ARGV[1] member ID; ARGV[2] member TTL in ms (0: leave the members);
-- ARGV[3] the member's load; ARGV[4] idle expiry of the keys in ms;
-- ARGV[5] the group's notice channel; ARGV[6] exclusion in ms (with
-- ARGV[2] 0: extend an existing entry to now + ARGV[6], or remove it when
-- 0; an entry's expiry only ever moves later, but for that removal); ARGV[7] the digest of the member's registered jobs, ARGV[8] those
-- jobs (space-separated), ARGV[9] the jobs it holds.
-- Prunes the members whose expiry passed (server time), then returns
-- {'ok', M, member, load, state, ... (M triples), digest, jobs, ...} of the
-- live ones (the caller sorts; state "" for a member that publishes none;
-- the job lists of every digest in use but the caller's own), or {'elect', LEASE} without registering when the election GROUP
-- of mode elect is held: the modes of one name exclude each other, and
-- acquire.lua refuses that lease while KEYS[4] has a live entry. Both
-- scripts run in this slot, so neither can slip in beside the other.
-- When the membership changed (a member joined, left or was pruned) it
-- publishes "elected 0 MEMBER" (joined) or "released 0 MEMBER" (gone) on
-- the channel, in the election notices' format, so the other members
-- rebalance at once instead of at their next heartbeat (and an elect-mode
-- candidate waiting for the group to go tries again).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('HDEL', KEYS[5], unpack(gone))
  redis.call('PUBLISH', ARGV[5], 'released 0 ' .. gone[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
-- exclude moves the member's exclusion entry to expire at ms, only ever
-- later: a heartbeat sent before the member left but run after its leave
-- (a slow request, a client's retry) must not shorten the entry the leave
-- extended over the drain. With xx it writes no entry that is gone.
local function exclude(ms, xx)
  local cur = redis.call('ZSCORE', KEYS[4], ARGV[1])
  if (cur and tonumber(cur) < ms) or (not cur and not xx) then
    redis.call('ZADD', KEYS[4], ms, ARGV[1])
  end
end
local ttl = tonumber(ARGV[2])
local excl = tonumber(ARGV[6])
if ttl > 0 then
  local lease = redis.call('GET', KEYS[3])
  if lease then
    if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
      redis.call('HDEL', KEYS[2], ARGV[1])
      redis.call('HDEL', KEYS[5], ARGV[1])
      redis.call('PUBLISH', ARGV[5], 'released 0 ' .. ARGV[1])
    end
    return {'elect', lease}
  end
  exclude(now + excl, false)
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'elected 0 ' .. ARGV[1])
  end
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[7] .. ' ' .. ARGV[9])
  redis.call('HSET', KEYS[6], ARGV[7], ARGV[8])
else
  if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'released 0 ' .. ARGV[1])
  end
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  if excl > 0 then
    exclude(now + excl, true)
  elseif redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[5], 'released 0 ' .. ARGV[1])
  end
end
local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
if #last == 0 then
  redis.call('DEL', KEYS[4])
else
  redis.call('PEXPIRE', KEYS[4], math.max(tonumber(last[2]) - now, 0) + 1000)
end
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if #members == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[5], KEYS[6])
  return {'ok', '0'}
end
local out = {'ok', tostring(#members)}
local used = {}
for _, m in ipairs(members) do
  local st = redis.call('HGET', KEYS[5], m) or ''
  out[#out + 1] = m
  out[#out + 1] = redis.call('HGET', KEYS[2], m) or '0'
  out[#out + 1] = st
  local d = string.match(st, '^(%S+)')
  if d then used[d] = true end
end
-- The job lists in use, bounded by the distinct job sets of live members
-- (one in a settled group); the others are dropped.
for _, d in ipairs(redis.call('HKEYS', KEYS[6])) do
  if not used[d] then
    redis.call('HDEL', KEYS[6], d)
  elseif d ~= ARGV[7] then
    out[#out + 1] = d
    out[#out + 1] = redis.call('HGET', KEYS[6], d)
  end
end
for i = 1, 6 do
  if i ~= 3 and i ~= 4 then redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
end
return out
