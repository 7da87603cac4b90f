-- Retry a merged scan in place (`kubectl bucketscan retry`, `bucketscan-worker
-- retry`): every dead shard, and every done shard whose parts hold `error`
-- records, goes back to pending as if never scanned (no checkpoint, no
-- parts, no counts, no failures: the merge that ended the scan deleted
-- nothing of the other shards' parts, and this shard's old parts are no
-- longer recorded, so the next merge reads each record once). The manifest
-- leaves `meta`, so the scan is not merged until the next merge; `retries`
-- records the round, which makes the step safe to send twice.
-- KEYS: meta, pending, shards set, done set, dead set, shard-hash prefix,
-- parts-list prefix
-- ARGV[1]: the round (1 for the first retry, then 2, ...)
-- ARGV[2]: the round Redis held when the caller read the manifest
-- ARGV[3]: redis.sha1hex of the manifest the caller read
-- The caller (`Queue::retry`) reads the manifest and the round at one
-- instant and judges the manifest in Rust, bounded: whether it is of the
-- round Redis holds, of a release with retries, and has dead shards or
-- error records. It calls this step only when there is something to scan
-- again. No JSON is decoded here: the scan's own user can write the
-- manifest and call this function, and decoding a crafted document of
-- megabytes would hold Redis, and its memory outside maxmemory, for every
-- tenant (docs/threat-model.md, T16). The step only checks that what the
-- caller judged is still what Redis holds: the round and the manifest's
-- hash (one copy of the manifest, no parse tree).
-- Returns {requeued, round}: requeued -1 when Redis holds this round or a
-- later one already (round: the one it holds), -2 when the scan has no
-- manifest (not merged, or Redis lost it), -5 when the round or the
-- manifest changed since the caller read them (it reads them again),
-- 0 when no shard needs scanning again (nothing changed),
-- -3 when the scan's state is beyond what one step may walk: nothing
-- changed.
-- Bounded: Redis cannot stop a function once it wrote, and the scan's own
-- user can add shard ids and hash fields, so the step reads at most
-- MAX_SHARDS shards (a 10^9-object plan has about 10,000; live splits add
-- some) and clears at most MAX_FIELDS fields of each, all checked before
-- the first write.
local MAX_SHARDS = 200000
local MAX_FIELDS = 256
-- What the merge stores at most (MAX_META_BYTES), though the scan's user
-- could store a larger one; a round is a short number.
local MAX_MANIFEST_BYTES = 8388608
local MAX_ROUND_BYTES = 20
local round = tonumber(ARGV[1])
if redis.call('HSTRLEN', KEYS[1], 'retries') > MAX_ROUND_BYTES then return {-3, 0} end
local held = tonumber(redis.call('HGET', KEYS[1], 'retries') or '0') or 0
if held >= round then return {-1, held} end
if held ~= tonumber(ARGV[2]) then return {-5, held} end
local size = redis.call('HSTRLEN', KEYS[1], 'manifest')
if size == 0 then return {-2, held} end
if size > MAX_MANIFEST_BYTES then return {-3, held} end
if redis.sha1hex(redis.call('HGET', KEYS[1], 'manifest')) ~= ARGV[3] then return {-5, held} end
if redis.call('SCARD', KEYS[3]) > MAX_SHARDS then return {-3, held} end
local again = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local shard = KEYS[6] .. id
  local state = redis.call('HGET', shard, 'state')
  local errors = tonumber(redis.call('HGET', shard, 'n:errors') or '0')
  if state == 'dead' or (state == 'done' and errors > 0) then
    if redis.call('HLEN', shard) > MAX_FIELDS then return {-3, held} end
    table.insert(again, id)
  end
end
if #again == 0 then return {0, held} end
for _, id in ipairs(again) do
  local shard = KEYS[6] .. id
  for _, field in ipairs(redis.call('HKEYS', shard)) do
    if string.sub(field, 1, 2) == 'n:' or field == 'checkpoint' or field == 'token' or field == 'owner' then
      redis.call('HDEL', shard, field)
    end
  end
  redis.call('HSET', shard, 'state', 'pending', 'failures', '0')
  redis.call('DEL', KEYS[7] .. id)
  redis.call('SREM', KEYS[4], id)
  redis.call('SREM', KEYS[5], id)
  redis.call('LPUSH', KEYS[2], id)
end
redis.call('HSET', KEYS[1], 'retries', ARGV[1])
redis.call('HDEL', KEYS[1], 'manifest')
return {#again, round}
