-- abandon: delete a lock taken by an acquire whose reply never came, if its
-- owner is exactly ARGV[1] (owners are unique per Lock call), and tell the
-- waiters.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] channel
-- Returns 1 deleted, 0 not ours (or absent).
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 'released ' .. h[1])
    return 1
  end
end
return 0
