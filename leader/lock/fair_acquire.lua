-- fair_acquire: acquire.lua with a FIFO queue of waiters (Redisson's fair
-- lock): only the queue's head may take a free lock. The queue holds Lock
-- calls (a call's attempts each have their own owner; its place in the
-- queue is the call's).
-- KEYS[1] lock hash, KEYS[2] term key, KEYS[3] queue (list of calls),
-- KEYS[4] slot timeouts (zset call -> server ms after which the slot is
-- dropped), KEYS[5] tombstones (as acquire.lua)
-- ARGV[1] owner (unique per attempt), ARGV[2] TTL ms, ARGV[3] re-entry
-- field or "", ARGV[4] "1" to queue (Lock) or "0" (TryLock: never queued),
-- ARGV[5] slot lifetime ms (refreshed by every attempt of its call),
-- ARGV[6] the call (its place in the queue), ARGV[7..] adoptable owners
-- (as acquire.lua's ARGV[4..])
-- Returns as acquire.lua; held by nobody but not our turn:
-- {0, "", ms until the head's slot times out}; both "held" replies carry
-- the last term minted as a fourth element. A call whose entry is
-- "CALL!TTL" takes grants: fair_release.lua may hand it the lock as
-- "CALL.0" for TTL ms, which it adopts (ARGV[7..]).
if ARGV[3] ~= '' then
  if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
    return {3, redis.call('HINCRBY', KEYS[1], ARGV[3], 1)}
  end
  return {-1}
end
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then
  return {-2}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local call = ARGV[6]
-- Drop waiters at the head whose slot timed out (they died or gave up).
local head = redis.call('LINDEX', KEYS[3], 0)
while head do
  local to = tonumber(redis.call('ZSCORE', KEYS[4], head))
  if to and to > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp then
    local o = string.sub(h[1], sp + 1)
    -- This attempt's own owner too: the same request run twice (a
    -- client re-sending it after a dropped connection) adopts what its
    -- first run took.
    local mine = o == ARGV[1]
    for i = 7, #ARGV do
      mine = mine or o == ARGV[i]
    end
    if mine then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return {2, h[1]}
    end
  end
end
if not h[1] and (not head or head == call) then
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], head)
  end
  local term = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = tonumber(redis.call('SET', KEYS[2], string.format('%d', term), 'GET') or '0') or 0
  if old >= term then
    term = old + 1
    redis.call('SET', KEYS[2], string.format('%d', term))
  end
  redis.call('HSET', KEYS[1], string.format('%d', term) .. ' ' .. ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, term}
end
-- Not ours: join (or stay in) the queue, refreshing our slot.
if ARGV[4] == '1' then
  if not redis.call('ZSCORE', KEYS[4], call) then
    redis.call('RPUSH', KEYS[3], call)
  end
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), call)
  redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[5]))
  redis.call('PEXPIRE', KEYS[4], 2 * tonumber(ARGV[5]))
end
-- The last term minted: a grant with a higher term came after this reply
-- (fair_release.lua), so the waiter may hold it without asking again.
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if h[1] then
  return {0, h[1], redis.call('PTTL', KEYS[1]), last}
end
local hto = tonumber(redis.call('ZSCORE', KEYS[4], head)) or now
return {0, '', math.max(hto - now, 1), last}
