-- proclaim: replace the value the holder proclaims, only if the lease is
-- still exactly ours. The info hash keeps the lease's expiry.
-- KEYS[1] lease key, KEYS[2] info key; ARGV[1] "TERM ID", ARGV[2] value
-- Returns 1 proclaimed, 0 not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'lease', ARGV[1], 'value', ARGV[2])
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then redis.call('PEXPIRE', KEYS[2], pttl) end
return 1
