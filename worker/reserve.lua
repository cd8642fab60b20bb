-- reserve: mint a term of the election KEYS[1] (its term key) without
-- taking its lease, by the rule every acquire follows: max(stored + 1,
-- the server clock in microseconds), so that the term is above every term
-- handed out before, even when Redis lost the term key (a restart without
-- persistence, a promoted replica that lagged). Both stay below 2^53, so
-- the double arithmetic is exact. A second run of the same request (a
-- client's retry) mints a higher term: as good to its caller.
-- Returns the term.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local term = (tonumber(redis.call('GET', KEYS[1]) or '0') or 0) + 1
if floor > term then term = floor end
redis.call('SET', KEYS[1], string.format('%d', term))
return term
