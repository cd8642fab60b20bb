-- renew: extend the lock only if the hold is still exactly ours. Never
-- re-creates a missing lock.
-- KEYS[1] lock hash; ARGV[1] "TERM OWNER", ARGV[2] TTL in milliseconds
-- Returns 1 renewed, 0 lost.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
