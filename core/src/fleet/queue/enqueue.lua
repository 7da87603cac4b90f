-- Add shards as pending, skipping ids that exist (re-planning adds nothing twice).
-- KEYS: pending, shard-hash prefix, set of all shard ids
-- ARGV: id1, range1, id2, range2, ...
-- Returns how many were added.
local added = 0
for i = 1, #ARGV, 2 do
  local shard = KEYS[2] .. ARGV[i]
  if redis.call('HSETNX', shard, 'range', ARGV[i + 1]) == 1 then
    redis.call('HSET', shard, 'state', 'pending', 'attempts', 0, 'failures', 0)
    redis.call('LPUSH', KEYS[1], ARGV[i])
    redis.call('SADD', KEYS[3], ARGV[i])
    added = added + 1
  end
end
return added
