-- release: delete the lease (and its info hash) only if it is still exactly
-- ours, then tell the waiting candidates.
-- KEYS[1] lease key, KEYS[2] info key, KEYS[3] candidates key,
-- KEYS[4] (optional) release note key
-- ARGV[1] "TERM ID", ARGV[2] events channel, ARGV[3] notice, ARGV[4] ID,
-- ARGV[5] (optional) ms to keep a note of the release: the info hash is
-- left holding only "released" = ARGV[1] for that long, and KEYS[4] (when
-- given) = ARGV[1], so that the same request run twice (a client
-- re-sending it after a dropped connection) answers 1 again. The next
-- acquire rewrites the info hash (readers ignore an info hash whose
-- "lease" is not the lease's), often before the re-send lands (followers
-- act on the notice): KEYS[4], which no acquire touches, still answers.
-- Returns 1 released (or by this very request), 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  if ARGV[5] then
    redis.call('HSET', KEYS[2], 'released', ARGV[1])
    redis.call('PEXPIRE', KEYS[2], ARGV[5])
    if KEYS[4] then
      redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[5])
    end
  end
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
if ARGV[5] and redis.call('HGET', KEYS[2], 'released') == ARGV[1] then
  return 1
end
if ARGV[5] and KEYS[4] and redis.call('GET', KEYS[4]) == ARGV[1] then
  return 1
end
return 0
