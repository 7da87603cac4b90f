-- Return every shard whose lease expired to pending, counting a failure;
-- dead-letter it after ARGV[1] failures. At most ARGV[2] shards per call:
-- a scan's user can fill the leases with a million expired members, and one
-- function over all of them would hold Redis (unkillable) for everyone.
-- KEYS: leases, pending, dead set, shard-hash prefix
-- Returns {requeued, dead}.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[2]))
local requeued, dead = 0, 0
for _, id in ipairs(expired) do
  local shard = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', shard, 'owner')
  redis.call('HSET', shard, 'last_error', 'lease expired (worker lost)')
  local failures = redis.call('HINCRBY', shard, 'failures', 1)
  if failures >= tonumber(ARGV[1]) then
    redis.call('HSET', shard, 'state', 'dead')
    redis.call('SADD', KEYS[3], id)
    dead = dead + 1
  else
    redis.call('HSET', shard, 'state', 'pending')
    redis.call('RPUSH', KEYS[2], id)
    requeued = requeued + 1
  end
end
return {requeued, dead}
