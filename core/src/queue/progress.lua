-- Add a worker's counter deltas to the scan's totals and record its live rate,
-- in one command (so progress costs one Redis operation per flush).
-- KEYS: counters hash, workers hash
-- ARGV[1]: worker name, ARGV[2]: worker status JSON, then field, delta pairs.
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
