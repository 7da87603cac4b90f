
-- The lease check of the steps that act on a leased shard (see library.rs).

-- The lease fields of shard hash `shard`, read with one HMGET (Redis load
-- is counted per command) before the step writes any. A step reads them
-- once and passes them on: the library's own locals live as long as the
-- library, so a cache here would outlive the call.
local function lease_fields(shard)
  local f = redis.call('HMGET', shard, 'state', 'owner', 'token', 'range', 'checkpoint')
  return {state = f[1], owner = f[2], token = f[3], range = f[4], checkpoint = f[5] or ''}
end

-- True when lease fields `f` say the shard is leased to `owner` under
-- fencing token `token`, so a worker whose lease expired (and was taken
-- over) is refused.
local function holds_lease(f, owner, token)
  return f.state == 'leased' and f.owner == owner and f.token == token
end

-- True when Redis holds the range (JSON) and checkpoint ('' = none) that the
-- lease holder believes it recorded last. They differ only when Redis lost
-- acknowledged writes (restarted from an AOF written every second, failed
-- over to a replica that lagged): a split or commit of this very lease is
-- gone, and recording more on top would leave a hole.
local function agrees(f, range, checkpoint)
  return f.range == range and f.checkpoint == checkpoint
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
