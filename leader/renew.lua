-- renew: extend the lease only if it is still exactly ours. Never
-- re-creates a missing lease. The info hash beside the lease (acquire.lua)
-- gets the same expiry, in the same round trip.
-- KEYS[1] lease key, KEYS[2] info key (optional);
-- ARGV[1] "TERM ID", ARGV[2] TTL in milliseconds
-- Returns 1 renewed, 0 lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[2] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return 1
end
return 0
