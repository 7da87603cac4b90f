-- Prepended to every script that acts on a leased shard (see mod.rs).

-- True when shard hash `shard` is leased to `owner` under fencing token
-- `token`, so a worker whose lease expired (and was taken over) is refused.
local function holds_lease(shard, owner, token)
  return redis.call('HGET', shard, 'state') == 'leased'
    and redis.call('HGET', shard, 'owner') == owner
    and redis.call('HGET', shard, 'token') == token
end

-- True when Redis holds the range (JSON) and checkpoint ('' = none) that the
-- lease holder believes it recorded last. They differ only when Redis lost
-- acknowledged writes (restarted from an AOF written every second, failed
-- over to a replica that lagged): a split or commit of this very lease is
-- gone, and recording more on top would leave a hole.
local function agrees(shard, range, checkpoint)
  return redis.call('HGET', shard, 'range') == range
    and (redis.call('HGET', shard, 'checkpoint') or '') == checkpoint
end

-- A lease whose holder and Redis disagree (see `agrees`): back to the right
-- of pending, to be scanned again from what Redis holds; no failure counted,
-- the shard is not at fault. The holder drops it.
local function requeue_diverged(shard, id, leases, pending)
  redis.call('ZREM', leases, id)
  redis.call('HDEL', shard, 'owner')
  redis.call('HSET', shard, 'state', 'pending',
    'last_error', 'Redis lost recorded progress of this shard; scanned again from its checkpoint')
  redis.call('RPUSH', pending, id)
end
