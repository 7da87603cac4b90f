-- Read several keys of a scan at one instant (a function runs atomically),
-- for the merge's view and a shard's recorded parts: what a MULTI/EXEC of
-- reads did, without granting MULTI/EXEC to a scan's user (a transaction of
-- a million commands holds Redis, unkillable). Registered 'no-writes', so
-- FUNCTION KILL can stop it and it runs at maxmemory.
-- KEYS[i] is read as ARGV[i] says: 'hash' HGETALL, 'set' SMEMBERS, 'list'
-- LRANGE 0 -1, 'field:NAME' HGET NAME. Returns the answers in order.
if #KEYS ~= #ARGV then
  error({err = 'ERR bucketscan read_keys: one way of reading per key'})
end
local out = {}
for i, key in ipairs(KEYS) do
  local how = ARGV[i]
  if how == 'hash' then
    out[i] = redis.call('HGETALL', key)
  elseif how == 'set' then
    out[i] = redis.call('SMEMBERS', key)
  elseif how == 'list' then
    out[i] = redis.call('LRANGE', key, 0, -1)
  elseif string.sub(how, 1, 6) == 'field:' then
    out[i] = redis.call('HGET', key, string.sub(how, 7))
  else
    error({err = 'ERR bucketscan read_keys: unknown way of reading ' .. how})
  end
end
return out
