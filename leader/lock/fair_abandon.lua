-- fair_abandon: abandon.lua for a fair lock: also leave the queue, and
-- wake the waiters when the lock is free (the next head may take it).
-- KEYS[1] lock hash, KEYS[3] queue, KEYS[4] slot timeouts (KEYS[2] unused)
-- ARGV[1] owner, ARGV[2] channel
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if not (sp and string.sub(h[1], sp + 1) == ARGV[1]) then
    return 0
  end
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released ' .. h[1])
  return 1
end
redis.call('PUBLISH', ARGV[2], 'left ' .. ARGV[1])
return 0
