-- End a lease. ARGV[4] = 'done' marks the shard complete (completing twice is
-- harmless: a done shard stays done); 'release' puts it back at the head of
-- pending (graceful stop); 'fail' counts a failure with error ARGV[5] and
-- dead-letters the shard after ARGV[6] failures. 'done' is refused unless
-- Redis holds the range ARGV[7] and checkpoint ARGV[8] the holder believes
-- (see `agrees`): completing a shard whose last commits Redis lost would
-- leave a hole, so it goes back to pending instead.
-- KEYS: shard hash, leases, pending, done set, dead set
-- ARGV[1]: shard id, ARGV[2]: owner, ARGV[3]: token
-- Returns the shard's state afterwards, 'lost' when the lease was not ours,
-- or 'diverged' when Redis disagreed (the shard is pending again).
local shard = KEYS[1]
if ARGV[4] == 'done' and redis.call('HGET', shard, 'state') == 'done' then return 'done' end
local lease = lease_fields(shard)
if not holds_lease(lease, ARGV[2], ARGV[3]) then return 'lost' end
if ARGV[4] == 'done' and not agrees(lease, ARGV[7], ARGV[8]) then
  requeue_diverged(shard, ARGV[1], KEYS[2], KEYS[3])
  return 'diverged'
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', shard, 'owner')
if ARGV[4] == 'done' then
  redis.call('HSET', shard, 'state', 'done')
  redis.call('SADD', KEYS[4], ARGV[1])
  return 'done'
end
if ARGV[4] == 'fail' then
  redis.call('HSET', shard, 'last_error', ARGV[5])
  local failures = redis.call('HINCRBY', shard, 'failures', 1)
  if failures >= tonumber(ARGV[6]) then
    redis.call('HSET', shard, 'state', 'dead')
    redis.call('SADD', KEYS[5], ARGV[1])
    return 'dead'
  end
end
redis.call('HSET', shard, 'state', 'pending')
redis.call('RPUSH', KEYS[3], ARGV[1])
return 'pending'
