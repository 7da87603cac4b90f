-- Heartbeat and checkpoint in one fenced step: only the current lease holder
-- (owner ARGV[2] with token ARGV[3]) may extend the lease to now + ARGV[4] ms,
-- record a checkpoint ARGV[5] (empty: none) and part key ARGV[6] (empty: none).
-- KEYS: shard hash, leases, parts list
-- ARGV[1]: shard id; ARGV[7..]: field, delta pairs added to the shard's
-- result counts (hash fields `n:FIELD`), so counts move with the part they
-- describe and a part that is never recorded is never counted.
-- Returns 1, or 0 when the lease is no longer ours (stop work on this shard).
local shard = KEYS[1]
if not holds_lease(shard, ARGV[2], ARGV[3]) then return 0 end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[4]), ARGV[1])
-- Checkpoints only grow: the same one again is this commit, re-sent after
-- its answer was lost, and must not record the part twice.
if ARGV[5] ~= '' and redis.call('HGET', shard, 'checkpoint') == ARGV[5] then return 1 end
if ARGV[5] ~= '' then redis.call('HSET', shard, 'checkpoint', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[6]) end
for i = 7, #ARGV, 2 do
  redis.call('HINCRBY', shard, 'n:' .. ARGV[i], ARGV[i + 1])
end
return 1
