-- redlock renew: renew.lua on one Redlock master, which also raises the
-- master's term key to the hold's term (the highest of its quorum's), so
-- that every later acquire on this master mints a higher one.
-- KEYS[1] lock hash, KEYS[2] term key; ARGV[1] "TERM OWNER" (this master's
-- term), ARGV[2] TTL in milliseconds, ARGV[3] the hold's term
-- Returns 1 renewed, 0 lost.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local old = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if old < tonumber(ARGV[3]) then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
