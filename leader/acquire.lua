-- acquire: take the lease if it is free, minting the next term.
-- KEYS[1] lease key, KEYS[2] term key
-- ARGV[1] candidate ID, ARGV[2] TTL in milliseconds, ARGV[3] events channel
-- A new lease is announced on the channel as "elected TERM ID", so
-- observers learn of it without polling.
-- Returns {outcome, value, pttl}: outcome 1 acquired, 2 adopted (already
-- ours: a retry after a lost reply; refreshed to the TTL), 0 held by another
-- (value is "TERM ID" of the holder, pttl its time left).
if redis.replicate_commands then redis.replicate_commands() end
local cur = redis.call('GET', KEYS[1])
if cur then
  local sp = string.find(cur, ' ', 1, true)
  if sp and string.sub(cur, sp + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, cur, tonumber(ARGV[2])}
  end
  return {0, cur, redis.call('PTTL', KEYS[1])}
end
-- Terms never go backwards, even when Redis lost the term key: the floor is
-- the server clock in microseconds. Both values stay below 2^53, so the
-- double arithmetic is exact; string.format('%d') avoids Lua's %.14g.
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local term = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1
if floor > term then term = floor end
local value = string.format('%d', term) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[2], string.format('%d', term))
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'elected ' .. value)
return {1, value, tonumber(ARGV[2])}
