-- release: delete the lease only if it is still exactly ours, then tell the
-- waiting candidates.
-- KEYS[1] lease key; ARGV[1] "TERM ID", ARGV[2] events channel, ARGV[3] notice
-- Returns 1 released, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
