-- Store a merge's manifest in `meta`, only if Redis still records the
-- merge's retry round: a merge that outlived a retry (its pod on a
-- partitioned node) writes nothing over the later round. The manifest is
-- larger than a step's argument may be (up to 8 MiB, MAX_META_BYTES), so
-- the merge first stages it in the field `manifest@ROUND` (a plain HSET);
-- this step moves it to `manifest` or, for a round Redis no longer
-- records, deletes it. The field is named by the round here, not by the
-- caller, so a stale merge deletes only its own staged copy.
-- KEYS: meta. ARGV[1]: the merge's round.
-- Returns {stored, round held}: stored 1 when moved, 0 when Redis records
-- another round (nothing stored), -1 when nothing was staged, -2 when
-- what was staged, or the round, is larger than a merge writes.
local MAX_MANIFEST_BYTES = 8388608
local MAX_ROUND_BYTES = 20
local MAX_SWEPT_FIELDS = 64
local staged = 'manifest@' .. ARGV[1]
if redis.call('HSTRLEN', KEYS[1], 'retries') > MAX_ROUND_BYTES then
  redis.call('HDEL', KEYS[1], staged)
  return {-2, 0}
end
local held = tonumber(redis.call('HGET', KEYS[1], 'retries') or '0') or 0
if held ~= tonumber(ARGV[1]) then
  redis.call('HDEL', KEYS[1], staged)
  return {0, held}
end
local size = redis.call('HSTRLEN', KEYS[1], staged)
if size == 0 then return {-1, held} end
if size > MAX_MANIFEST_BYTES then
  redis.call('HDEL', KEYS[1], staged)
  return {-2, held}
end
redis.call('HSET', KEYS[1], 'manifest', redis.call('HGET', KEYS[1], staged))
redis.call('HDEL', KEYS[1], staged)
-- Copies other merges staged and never moved (a merge of an earlier round
-- killed between its HSET and this step) go too: no merge of their round
-- will run again. A merge's meta has a few tens of fields; one a scan's
-- own user filled beyond that is left as it is rather than walked.
if redis.call('HLEN', KEYS[1]) <= MAX_SWEPT_FIELDS then
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 9) == 'manifest@' then
      redis.call('HDEL', KEYS[1], field)
    end
  end
end
return {1, held}
