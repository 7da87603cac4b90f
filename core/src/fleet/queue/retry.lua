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
-- Returns {requeued, round}: requeued -1 when Redis holds this round or a
-- later one already (round: the one it holds), -2 when the scan is not
-- merged in the round Redis holds (no manifest, or one a merge of an
-- earlier round wrote after a retry: not this round's), 0 when nothing
-- needs scanning again (nothing changed; judged by the manifest too: a
-- manifest of a later round adopted from S3 after a rollback says so while
-- the shards' records are the earlier round's),
-- -3 when the scan's state is beyond what one step may walk, -4 when its
-- manifest is of a release before retries (whose merge deleted every part,
-- so the other shards' parts a new merge reads are gone): nothing changed.
-- Bounded: Redis cannot stop a function once it wrote, and the scan's own
-- user can add shard ids and hash fields, so the step reads at most
-- MAX_SHARDS shards (a 10^9-object plan has about 10,000; live splits add
-- some) and clears at most MAX_FIELDS fields of each, all checked before
-- the first write.
local MAX_SHARDS = 200000
local MAX_FIELDS = 256
-- The manifest is decoded (cjson): at most what the merge stores (8 MiB,
-- MAX_META_BYTES), though the scan's user could store a larger one.
local MAX_MANIFEST_BYTES = 8388608
local round = tonumber(ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], 'retries') or '0')
if held >= round then return {-1, held} end
local size = redis.call('HSTRLEN', KEYS[1], 'manifest')
if size == 0 then return {-2, held} end
if size > MAX_MANIFEST_BYTES then return {-3, held} end
local manifest = redis.call('HGET', KEYS[1], 'manifest')
if not string.find(manifest, '"retries":', 1, true) then return {-4, held} end
local decoded, merged = pcall(cjson.decode, manifest)
if not decoded or type(merged) ~= 'table' then return {-2, held} end
if (tonumber(merged['retries']) or 0) ~= held then return {-2, held} end
local counted = merged['counts']
local errors = 0
if type(counted) == 'table' then errors = tonumber(counted['errors']) or 0 end
if (tonumber(merged['shards_dead']) or 0) == 0 and errors == 0 then return {0, held} end
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
