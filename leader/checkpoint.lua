-- checkpoint: record a number beside the lease, fenced by the lease and
-- monotonic (a failover never moves it back).
-- KEYS[1] lease key, KEYS[2] checkpoint key; ARGV[1] "TERM ID", ARGV[2] n
-- Returns 1 recorded, 0 not greater than the recorded value, -1 lease not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local cur = redis.call('GET', KEYS[2])
if cur and tonumber(cur) and tonumber(cur) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
