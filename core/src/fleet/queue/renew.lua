-- Heartbeat and checkpoint in one fenced step: only the current lease holder
-- (owner ARGV[2] with token ARGV[3]) may extend the lease to now + ARGV[4] ms,
-- record a checkpoint ARGV[5] (empty: none) and part key ARGV[6] (empty: none).
-- A commit also says what the holder believes Redis holds: range ARGV[7]
-- (JSON) and checkpoint ARGV[8] (empty: none); a bare heartbeat sends an
-- empty ARGV[7] and is not checked.
-- An incremental scan's commit also records the part's change part ARGV[9]
-- (empty: none) after it, in the same step: the change set moves with the
-- checkpoint as the result does.
-- KEYS: shard hash, leases, parts list, pending
-- ARGV[1]: shard id; ARGV[10..]: field, delta pairs added to the shard's
-- result counts (hash fields `n:FIELD`), so counts move with the part they
-- describe and a part that is never recorded is never counted.
-- Returns 1; 0 when the lease is no longer ours; 2 when Redis disagrees with
-- the holder (the shard went back to pending). On 0 or 2 stop work on it.
local shard = KEYS[1]
local lease = lease_fields(shard)
if not holds_lease(lease, ARGV[2], ARGV[3]) then return 0 end
-- A commit re-sent after its answer was lost must not record twice. Its part
-- key names it (each part of a lease has a key of its own): the last part
-- recorded, it was this commit. A checkpoint equal to the stored one says
-- nothing of a part (two parts may end at the same checkpoint after a
-- resume), so it names only commits without a part.
local resent
local last_part = ARGV[9] ~= '' and ARGV[9] or ARGV[6]
if last_part ~= '' then
  resent = redis.call('LINDEX', KEYS[3], -1) == last_part
else
  resent = ARGV[5] ~= '' and lease.checkpoint == ARGV[5]
end
if ARGV[7] ~= '' and not agrees(lease, ARGV[7], resent and ARGV[5] or ARGV[8]) then
  requeue_diverged(shard, ARGV[1], KEYS[2], KEYS[4])
  return 2
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[4]), ARGV[1])
if resent then return 1 end
if ARGV[5] ~= '' then redis.call('HSET', shard, 'checkpoint', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[6]) end
if ARGV[9] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[9]) end
for i = 10, #ARGV, 2 do
  redis.call('HINCRBY', shard, 'n:' .. ARGV[i], ARGV[i + 1])
end
return 1
