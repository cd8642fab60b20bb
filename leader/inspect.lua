-- inspect: the holder, its time left, its info hash and the live
-- candidates, in one atomic read (it writes nothing).
-- KEYS[1] lease key, KEYS[2] info key, KEYS[3] candidates key
-- ARGV[1] most candidates returned
-- Returns {value, pttl, info, candidates}: value "" when there is no lease;
-- info is HGETALL of the info hash (empty when absent); candidates are the
-- members whose score (server time in ms) has not passed, soonest gone
-- first.
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cands = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%d', nowms), '+inf',
  'LIMIT', 0, ARGV[1])
local v = redis.call('GET', KEYS[1])
if not v then return {'', 0, {}, cands} end
return {v, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[2]), cands}
