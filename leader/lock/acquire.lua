-- acquire: take the lock if it is free, minting the next term; or re-enter a
-- hold of this owner; or report the holder.
-- KEYS[1] lock hash (field "TERM OWNER" -> hold count), KEYS[2] term key
-- ARGV[1] owner, ARGV[2] TTL in milliseconds,
-- ARGV[3] "TERM OWNER" of the hold to re-enter, or "" for a new hold
-- Returns {1, term} acquired; {2, term} adopted (this very owner's earlier
-- attempt took it: a retry after a lost reply; refreshed to the TTL);
-- {3, count} re-entered; {0, "TERM OWNER", pttl} held by another;
-- {-1} the hold to re-enter is gone.
if ARGV[3] ~= '' then
  if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
    return {3, redis.call('HINCRBY', KEYS[1], ARGV[3], 1)}
  end
  return {-1}
end
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, tonumber(string.sub(h[1], 1, sp - 1))}
  end
  return {0, h[1], redis.call('PTTL', KEYS[1])}
end
-- Terms never go backwards, even when Redis lost the term key: the floor is
-- the server clock in microseconds (as the election's acquire). SET ... GET
-- reads and writes the term key in one call; the rare case where the stored
-- term is not below the clock writes it once more.
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
