-- release: drop one hold of a term; delete the lock when none is left, and
-- tell the waiters.
-- KEYS[1] lock hash; ARGV[1] "TERM OWNER", ARGV[2] "1" when the caller's
-- last hold of the term goes (delete whatever the count: a re-entry whose
-- reply was lost may have counted one more), ARGV[3] channel
-- Returns the holds left (0: deleted and announced; only the last hold
-- deletes), -1 not ours.
if ARGV[2] == '1' then
  -- The hash has one field (the holder's): deleting it deletes the key.
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
else
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
  -- Not the caller's last hold: never delete. A release that ran twice
  -- (a client re-sending it after a dropped connection) would otherwise
  -- take the count to zero under the term's other live holds; the
  -- caller's own count decides which release is the last.
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n < 1 then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    n = 1
  end
  return n
end
redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[1])
return 0
