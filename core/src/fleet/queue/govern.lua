-- A worker's window of requests for the rate governor (about once a second),
-- in one command: add its counts to the fleet's window, note it as sending,
-- and answer the governors' states. At most one caller per window also gets
-- the window itself (and empties it): that worker steps the governors
-- (fleet::governor) and writes them back with `set_governors`.
-- KEYS: governor hash (partition -> state JSON, "_at" -> ms of the last
--       step), window hash, sending workers zset, step lock
-- ARGV[1]: worker, ARGV[2]: window ms, then partition, requests, throttles,
--          latency µs, repeated.
-- Returns {workers sending, elapsed ms of the window or -1, governor pairs,
--          window pairs (when this caller steps)}.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[3], now_ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms - 5 * tonumber(ARGV[2]))
for i = 3, #ARGV, 4 do
  redis.call('HINCRBY', KEYS[2], ARGV[i] .. '|r', ARGV[i + 1])
  redis.call('HINCRBY', KEYS[2], ARGV[i] .. '|t', ARGV[i + 2])
  redis.call('HINCRBY', KEYS[2], ARGV[i] .. '|l', ARGV[i + 3])
end
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
