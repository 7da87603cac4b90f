-- A worker found nothing pending. While other workers still hold shards it
-- is noted as idle until now + ARGV[2] ms, which asks the lease holders to
-- split their shards for it (see split.lua).
-- KEYS: idle zset, pending, leases
-- ARGV[1]: worker name
-- Returns {pending, leased}.
local pending = redis.call('LLEN', KEYS[2])
local leased = redis.call('ZCARD', KEYS[3])
if leased > 0 then
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
end
return {pending, leased}
