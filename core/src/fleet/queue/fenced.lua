-- Prepended to every script that acts on a leased shard (see queue.rs):
-- true when shard hash `shard` is leased to `owner` under fencing token
-- `token`, so a worker whose lease expired (and was taken over) is refused.
local function holds_lease(shard, owner, token)
  return redis.call('HGET', shard, 'state') == 'leased'
    and redis.call('HGET', shard, 'owner') == owner
    and redis.call('HGET', shard, 'token') == token
end
