-- Add a worker's counter deltas to the scan's totals and record its live rate,
-- in one command (so progress costs one Redis operation per flush).
-- KEYS: counters hash, workers hash, pending, idle zset,
--       reported hash (worker -> id of its last counted report)
-- ARGV[1]: worker name, ARGV[2]: worker status JSON, ARGV[3]: report id
-- (random per report; a report re-sent because its answer was lost carries
-- the same id and is not counted again), then field, delta pairs.
-- Returns 1 when a worker is idle while nothing is pending (lease holders
-- should split their shards: split.lua), else 0.
if redis.call('HGET', KEYS[5], ARGV[1]) ~= ARGV[3] then
  for i = 4, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  end
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[3])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('LLEN', KEYS[3]) > 0 then return 0 end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if redis.call('ZCOUNT', KEYS[4], now_ms, '+inf') > 0 then return 1 end
return 0
