-- redlock renew by owner: renew a Redlock master whose acquire was never
-- confirmed (its reply came after the quorum's) if the lock there is held
-- by exactly this owner (owners are unique per attempt, so the key is
-- this hold's), and raise the master's term key to the hold's term.
-- KEYS[1] lock hash, KEYS[2] term key; ARGV[1] owner, ARGV[2] TTL in
-- milliseconds, ARGV[3] the hold's term
-- Returns 1 renewed, 0 not held by owner.
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[1] then
    local old = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    if old < tonumber(ARGV[3]) then
      redis.call('SET', KEYS[2], ARGV[3])
    end
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
end
return 0
