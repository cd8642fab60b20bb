-- checkpoint: record a number beside the lease, fenced by the lease and
-- monotonic (a failover never moves it back).
-- KEYS[1] lease key, KEYS[2] checkpoint key, KEYS[3] (optional) the info
-- hash; ARGV[1] "TERM ID", ARGV[2] n, ARGV[3] (optional) the request's ID
-- The lease notes in its info hash (field KEYS[2]) the ID of the request
-- that recorded the value, so that the same request run twice (a client
-- re-sending it after a dropped connection) answers 1 again, while
-- another request with an equal value still gets 0; the note goes with
-- the lease (an acquire rewrites the info hash).
-- Returns 1 recorded (or by this very request), 0 not greater than the
-- recorded value (written again: see below), -1 lease not ours.
-- Values are int64 in decimal. Lua numbers are doubles, exact only below
-- 2^53, and the failed-terms count (term × 1000 + n, about 1.8e18) is far
-- above that: tonumber would make term×1000+1 equal to term×1000. So the
-- values are compared as decimal strings (sign, then length, then digits).
local function int(s)
  return s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil
end
-- less(a, b) is a < b for canonical decimal integers a and b.
local function less(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end -- -x < -y iff y < x
  if #a ~= #b then return #a < #b end
  return a < b
end
if not int(ARGV[2]) then
  return redis.error_reply('checkpoint: value ' .. ARGV[2] .. ' is not an integer')
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local noted = ARGV[3] and KEYS[3] and redis.call('HGET', KEYS[3], 'lease') == ARGV[1]
local cur = redis.call('GET', KEYS[2])
if cur and int(cur) and not less(cur, ARGV[2]) then
  -- Written again, so that a WAIT after this script on this connection
  -- covers the recorded value too: it may be a write of an earlier run
  -- or request that no replica has yet (its reply lost, or refused by
  -- WAIT), and the caller must not take it as recorded unless a replica
  -- acknowledges it.
  redis.call('SET', KEYS[2], cur)
  if noted and cur == ARGV[2] and redis.call('HGET', KEYS[3], KEYS[2]) == ARGV[3] then
    return 1
  end
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
if noted then
  redis.call('HSET', KEYS[3], KEYS[2], ARGV[3])
end
return 1
