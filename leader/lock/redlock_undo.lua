-- redlock undo: delete a partial acquisition of a failed Redlock attempt
-- if its owner is exactly ARGV[1], as abandon.lua, but without a release
-- notice: the key was never a hold, and a notice would only wake the other
-- contenders into the same collision.
-- KEYS[1] lock hash; ARGV[1] owner
-- Returns 1 deleted, 0 not ours (or absent).
local h = redis.call('HKEYS', KEYS[1])
if h[1] then
  local sp = string.find(h[1], ' ', 1, true)
  if sp and string.sub(h[1], sp + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
end
return 0
