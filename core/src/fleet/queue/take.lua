-- Take the next pending shard: lease it to ARGV[1] until now + ARGV[2] ms.
-- KEYS: pending, leases, shard-hash prefix (KEYS[3] .. id), idle zset
-- Returns {id, range_json, checkpoint or "", token} or nil when nothing is pending.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
while true do
  local id = redis.call('RPOP', KEYS[1])
  if not id then return nil end
  local shard = KEYS[3] .. id
  if redis.call('HGET', shard, 'state') == 'pending' then
    local token = redis.call('HINCRBY', shard, 'attempts', 1)
    redis.call('HSET', shard, 'state', 'leased', 'owner', ARGV[1], 'token', token)
    redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), id)
    redis.call('ZREM', KEYS[4], ARGV[1])
    local checkpoint = redis.call('HGET', shard, 'checkpoint') or ''
    return {id, redis.call('HGET', shard, 'range'), checkpoint, token}
  end
  -- A stale id (already done or dead): drop it and look further.
end
