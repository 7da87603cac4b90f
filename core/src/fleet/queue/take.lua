-- Take the next pending shard: lease it to ARGV[1] until now + ARGV[2] ms
-- under fencing token ARGV[3], which the worker draws at random for this
-- take. Random tokens stay unique when Redis rolls back (attempt numbers
-- would repeat), and the token doubles as the request's id: a take re-sent
-- because its answer was lost finds the lease it made (in `took`) and
-- returns it again, instead of leasing a second shard nobody works on.
-- KEYS: pending, leases, shard-hash prefix (KEYS[3] .. id), idle zset,
--       took hash (worker -> "token id" of its last take)
-- ARGV[4]: "extra" for a worker's additional shard (another LIST stream of
--          a worker that already holds one): taken only while no worker
--          waits for work, so extra streams never take a shard split off
--          for an idle worker, nor one it could take.
-- Returns {id, range_json, checkpoint or "", token} or nil when nothing is
-- pending (or, for an extra take, when a worker is idle).
local function lease_of(id)
  local shard = KEYS[3] .. id
  local checkpoint = redis.call('HGET', shard, 'checkpoint') or ''
  return {id, redis.call('HGET', shard, 'range'), checkpoint, ARGV[3]}
end

local last = redis.call('HGET', KEYS[5], ARGV[1])
if last then
  local token, id = string.match(last, '^(%S+) (.+)$')
  if token == ARGV[3] and holds_lease(lease_fields(KEYS[3] .. id), ARGV[1], ARGV[3]) then
    return lease_of(id)
  end
end

local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if ARGV[4] == 'extra' and redis.call('ZCOUNT', KEYS[4], now_ms, '+inf') > 0 then
  return nil
end
while true do
  local id = redis.call('RPOP', KEYS[1])
  if not id then return nil end
  local shard = KEYS[3] .. id
  if redis.call('HGET', shard, 'state') == 'pending' then
    redis.call('HINCRBY', shard, 'attempts', 1)
    redis.call('HSET', shard, 'state', 'leased', 'owner', ARGV[1], 'token', ARGV[3])
    redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), id)
    redis.call('ZREM', KEYS[4], ARGV[1])
    redis.call('HSET', KEYS[5], ARGV[1], ARGV[3] .. ' ' .. id)
    return lease_of(id)
  end
  -- A stale id (already done or dead): drop it and look further.
end
