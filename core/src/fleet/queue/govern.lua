-- A worker's window of requests for the rate governor (about once a second),
-- in one command: add its counts to the fleet's window, note it as sending
-- (if it sent any),
-- and answer the governors' states. At most one caller per window also gets
-- the window itself (and empties it): that worker steps the governors
-- (fleet::governor) and writes them back with `set_governors`.
-- KEYS: governor hash (partition -> state JSON, "_at" -> ms of the last
--       step), window hash, sending workers zset, step lock
-- ARGV[1]: worker, ARGV[2]: window ms, ARGV[3]: most partitions kept, then
--          partition, requests, throttles, latency µs, repeated. A worker
--          that sent requests to a partition adds 1 to its `|w` (senders).
--          A partition new to the governors while they hold the most is
--          counted in `*` (the Redis state stays bounded).
-- Returns {workers sending, elapsed ms of the window or -1, governor pairs,
--          window pairs (when this caller steps)}.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local most = tonumber(ARGV[3])
local sent = false
for i = 4, #ARGV, 4 do
  local p = ARGV[i]
  if p ~= '*' and redis.call('HEXISTS', KEYS[1], p) == 0
     and redis.call('HLEN', KEYS[1]) > most then
    p = '*'
  end
  redis.call('HINCRBY', KEYS[2], p .. '|r', ARGV[i + 1])
  redis.call('HINCRBY', KEYS[2], p .. '|t', ARGV[i + 2])
  redis.call('HINCRBY', KEYS[2], p .. '|l', ARGV[i + 3])
  if tonumber(ARGV[i + 1]) > 0 then
    redis.call('HINCRBY', KEYS[2], p .. '|w', 1)
    sent = true
  end
end
-- Only a worker that sent requests shares the rate (an idle one waiting
-- for a shard would take a share it does not use).
if sent then
  redis.call('ZADD', KEYS[3], now_ms, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms - 5 * tonumber(ARGV[2]))
local sending = redis.call('ZCARD', KEYS[3])
local elapsed = -1
local window = {}
if redis.call('SET', KEYS[4], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local at = tonumber(redis.call('HGET', KEYS[1], '_at') or (now_ms - tonumber(ARGV[2])))
  elapsed = now_ms - at
  window = redis.call('HGETALL', KEYS[2])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], '_at', now_ms)
end
return {sending, elapsed, redis.call('HGETALL', KEYS[1]), window}
