-- inspect: the holder and its time left, in one atomic read.
-- KEYS[1] lease key. Returns {value, pttl} or false when there is no lease.
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
