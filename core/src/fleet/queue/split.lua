-- Live splitting: the holder of a leased shard keeps the lower part of its
-- range and the upper part becomes a new pending shard, taken next. Fenced
-- like renew, and done only while a worker is idle and nothing is pending;
-- each split serves one idle worker.
-- KEYS: shard hash, pending, shards set, idle zset, new shard's hash, leases
-- ARGV: shard id, owner, token, range now (JSON), lower range (JSON),
--       new shard id, upper range (JSON)
-- Returns 1 split (or already split by this same call, retried),
--         2 not wanted any more, 0 the lease is no longer ours,
--         3 Redis holds another range than the holder (it lost a split):
--           the shard went back to pending.
local shard = KEYS[1]
local lease = lease_fields(shard)
if not holds_lease(lease, ARGV[2], ARGV[3]) then return 0 end
local range = lease.range
if range == ARGV[5] and redis.call('EXISTS', KEYS[5]) == 1 then return 1 end
if range ~= ARGV[4] then
  requeue_diverged(shard, ARGV[1], KEYS[6], KEYS[2])
  return 3
end
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
if redis.call('LLEN', KEYS[2]) > 0 or redis.call('ZCARD', KEYS[4]) == 0 then
  return 2
end
redis.call('HSET', KEYS[5], 'range', ARGV[7], 'state', 'pending', 'attempts', 0,
  'split_from', ARGV[1])
redis.call('SADD', KEYS[3], ARGV[6])
redis.call('RPUSH', KEYS[2], ARGV[6])
redis.call('HSET', shard, 'range', ARGV[5])
redis.call('HINCRBY', shard, 'splits', 1)
redis.call('ZPOPMAX', KEYS[4])
return 1
