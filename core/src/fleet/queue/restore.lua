-- Put back a finished shard from its done record in S3 after Redis lost the
-- scan, and add its exact counts to the scan's progress counters, so the
-- progress shown rebuilds from the finished work instead of starting at 0.
-- A shard already done is left alone: restoring twice (a lost reply, a
-- second replan) counts nothing twice.
-- KEYS: shard hash, parts list, shards set, done set, counters hash
-- ARGV[1]: shard id, ARGV[2]: range JSON, ARGV[3]: number of parts P,
-- ARGV[4 .. 3+P]: the parts, ARGV[4+P]: number of count pairs C, then C
-- (field, n) pairs for the shard's `n:` fields, then (counter, delta) pairs.
-- Returns 1 when restored, 0 when the shard was done already.
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'range', ARGV[2], 'state', 'done', 'attempts', '1', 'failures', '0')
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
local parts = tonumber(ARGV[3])
for i = 4, 3 + parts do
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
local at = 4 + parts
local counts = tonumber(ARGV[at])
for i = at + 1, at + 2 * counts, 2 do
  redis.call('HSET', KEYS[1], 'n:' .. ARGV[i], ARGV[i + 1])
end
for i = at + 1 + 2 * counts, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[5], ARGV[i], ARGV[i + 1])
end
return 1
