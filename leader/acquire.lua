-- acquire: take the lease if it is free, minting the next term.
-- KEYS[1] lease key, KEYS[2] term key, KEYS[3] info key, KEYS[4] candidates key,
-- KEYS[5] (optional) the spread group's exclusion key
-- ARGV[1] candidate ID, ARGV[2] TTL in milliseconds, ARGV[3] events channel,
-- ARGV[4] renew interval in milliseconds, ARGV[5] proclaimed value,
-- ARGV[6] candidate window in milliseconds, ARGV[7] most candidates kept,
-- ARGV[8] the caller's protocol, ARGV[9] the oldest protocol it shares an
-- election with (both 1 when absent)
-- A new lease is announced on the channel as "elected TERM ID", so
-- observers learn of it without polling. Beside the lease, the info hash
-- (lease, ttl_ms, renew_ms, value, since_ms, proto, proto_min) tells
-- readers what only the holder knows; it expires with the lease. A candidate that finds the lease
-- held is recorded in the candidates sorted set, scored with the server
-- time (ms) after which it counts as gone: the holder's time left plus the
-- window, so it outlives a follower's sleep until the lease runs out.
-- Returns {outcome, value, pttl}: outcome 1 acquired, 2 adopted (already
-- ours: a retry after a lost reply; refreshed to the TTL), 0 held by another
-- (value is "TERM ID" of the holder, pttl its time left), 3 refused: a
-- spread group of this name is live (below), 4 refused: the holder speaks
-- a protocol the caller does not share an election with (below).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local proto, protoMin = ARGV[8] or '1', ARGV[9] or '1'
local function info(value, since)
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'lease', value, 'ttl_ms', ARGV[2], 'renew_ms', ARGV[4],
    'value', ARGV[5], 'since_ms', since, 'proto', proto, 'proto_min', protoMin)
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local sp = string.find(cur, ' ', 1, true)
  if sp and string.sub(cur, sp + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local since = redis.call('HGET', KEYS[3], 'since_ms')
    if redis.call('HGET', KEYS[3], 'lease') ~= cur or not since then
      since = string.format('%d', nowms)
    end
    info(cur, since)
    return {2, cur, tonumber(ARGV[2])}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  -- Version skew: the holder's protocol and the oldest it shares an
  -- election with are in its info (absent: protocol 1, the one solo spoke
  -- before it wrote them; a lease without its info is one of those). Two
  -- protocols share an election when each is at least the other's oldest.
  -- A caller that does not share one with the holder is refused and taken
  -- off the candidates (it may have waited under a compatible holder):
  -- {4, holder, pttl, "PROTO PROTO_MIN" of the holder}.
  local hp, hm = 1, 1
  if redis.call('HGET', KEYS[3], 'lease') == cur then
    hp = tonumber(redis.call('HGET', KEYS[3], 'proto') or '1') or 1
    hm = tonumber(redis.call('HGET', KEYS[3], 'proto_min') or '1') or 1
  end
  if hp < tonumber(protoMin) or tonumber(proto) < hm then
    redis.call('ZREM', KEYS[4], ARGV[1])
    return {4, cur, pttl, string.format('%d %d', hp, hm)}
  end
  local left = math.max(pttl, 0) + tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', string.format('%d', nowms))
  redis.call('ZADD', KEYS[4], string.format('%d', nowms + left), ARGV[1])
  -- Bounded: keep the most recently seen candidates.
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -(tonumber(ARGV[7]) + 1))
  if redis.call('PTTL', KEYS[4]) < left then
    redis.call('PEXPIRE', KEYS[4], string.format('%d', left))
  end
  return {0, cur, pttl}
end
-- The modes of one name exclude each other: while a spread group of this
-- name has a live member (KEYS[5], PREFIX:{NAME}:spread, member -> server
-- ms until which it may run a job of the group; worker/spread.lua), the
-- lease is not taken. Returns {3, "0 MEMBER", ms until that member's entry
-- expires}. The heartbeat refuses to register while the lease exists, and
-- both run in this slot, so neither can slip in beside the other.
if KEYS[5] then
  local live = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. string.format('%d', nowms), '+inf',
    'WITHSCORES', 'LIMIT', 0, 1)
  if #live > 0 then
    return {3, '0 ' .. live[1], tonumber(live[2]) - nowms}
  end
end
-- Terms never go backwards, even when Redis lost the term key: the floor is
-- the server clock in microseconds. Both values stay below 2^53, so the
-- double arithmetic is exact; string.format('%d') avoids Lua's %.14g.
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local term = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1
if floor > term then term = floor end
local value = string.format('%d', term) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[2], string.format('%d', term))
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
info(value, string.format('%d', nowms))
redis.call('PUBLISH', ARGV[3], 'elected ' .. value)
return {1, value, tonumber(ARGV[2])}
