-- release: delete the lease (and its info hash) only if it is still exactly
-- ours, then tell the waiting candidates.
-- KEYS[1] lease key, KEYS[2] info key, KEYS[3] candidates key
-- ARGV[1] "TERM ID", ARGV[2] events channel, ARGV[3] notice, ARGV[4] ID
-- Returns 1 released, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
