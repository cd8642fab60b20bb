-- acquire: take the lock if it is free, minting the next term; or re-enter a
-- hold; or adopt what an earlier attempt of the same Lock call took; or
-- report the holder.
-- KEYS[1] lock hash (field "TERM OWNER" -> hold count), KEYS[2] term key,
-- KEYS[3] tombstones (zset: owners of abandoned attempts -> server ms when
-- the tombstone may go)
-- ARGV[1] owner (unique per attempt), ARGV[2] TTL in milliseconds,
-- ARGV[3] "TERM OWNER" of the hold to re-enter, or "" for a new hold,
-- ARGV[4..] owners of the same call's earlier attempts whose outcome is
-- unknown and that nothing has undone: the only holders it may adopt
-- Returns {1, term} acquired; {2, "TERM OWNER"} adopted (refreshed to the
-- TTL); {3, count} re-entered; {0, "TERM OWNER", pttl} held by another;
-- {-1} the hold to re-enter is gone; {-2} this attempt was abandoned (its
-- call gave up or ended before the request landed): nothing done.
if ARGV[3] ~= '' then
  if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
    return {3, redis.call('HINCRBY', KEYS[1], ARGV[3], 1)}
  end
  return {-1}
end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return {-2}
end
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp then
    local o = string.sub(h[1], sp + 1)
    -- This attempt's own owner too: the same request run twice (a
    -- client re-sending it after a dropped connection) adopts what its
    -- first run took.
    local mine = o == ARGV[1]
    for i = 4, #ARGV do
      mine = mine or o == ARGV[i]
    end
    if mine then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return {2, h[1]}
    end
  end
  return {0, h[1], redis.call('PTTL', KEYS[1])}
end
-- Terms never go backwards, even when Redis lost the term key: the floor is
-- the server clock in microseconds (as the election's acquire). SET ... GET
-- reads and writes the term key in one call; the rare case where the stored
-- term is not below the clock writes it once more. Terms stay below 2^53
-- (the clock in µs is about 1.8e15), so Lua's doubles hold them exactly.
local t = redis.call('TIME')
local term = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = string.format('%d', term)
local old = tonumber(redis.call('SET', KEYS[2], s, 'GET') or '0') or 0
if old >= term then
  term = old + 1
  s = string.format('%d', term)
  redis.call('SET', KEYS[2], s)
end
redis.call('HSET', KEYS[1], s .. ' ' .. ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, term}
