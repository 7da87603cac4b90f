-- Adopt a later retry round (the merge, after Redis was rolled back past a
-- round whose merge wrote manifest.json in S3): rounds only grow, so the
-- round Redis records is raised to ARGV[1], never lowered. The merge
-- stored that round's manifest in `meta` just before: readers take a
-- manifest only when its round is the round Redis records, so until this
-- step the manifest is not read as merged, and after it it is.
-- KEYS: meta. ARGV[1]: the round. Returns the round Redis records now.
local round = tonumber(ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], 'retries') or '0')
if held >= round then return held end
redis.call('HSET', KEYS[1], 'retries', ARGV[1])
return round
