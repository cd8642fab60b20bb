-- release: drop one hold of a term; delete the lock when none is left, and
-- tell the waiters.
-- KEYS[1] lock hash; ARGV[1] "TERM OWNER", ARGV[2] "1" when the caller's
-- last hold of the term goes (delete whatever the count: a re-entry whose
-- reply was lost may have counted one more), ARGV[3] channel
-- Returns the holds left (0: deleted and announced), -1 not ours.
if ARGV[2] == '1' then
  -- The hash has one field (the holder's): deleting it deletes the key.
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
else
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n > 0 then return n end
  redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[1])
return 0
