-- renew: extend the lease only if it is still exactly ours. Never
-- re-creates a missing lease.
-- KEYS[1] lease key; ARGV[1] "TERM ID", ARGV[2] TTL in milliseconds
-- Returns 1 renewed, 0 lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
