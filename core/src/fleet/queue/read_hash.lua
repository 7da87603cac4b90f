-- Read a hash without letting its size reach the caller (the operator reads
-- keys a scan's own user may write: a 25 MB value or a million fields there
-- must not become its memory). Registered with the 'no-writes' flag.
-- KEYS[1]: the hash. ARGV[1]: the most fields read; ARGV[2]: the most bytes
-- of a field's name or value; ARGV[3..]: the fields to read (none: all,
-- unless the hash has more than ARGV[1] fields: then none is read).
-- Returns {fields in the hash, fields left out as too large, f1, v1, ...}.
local max_fields, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local total = redis.call('HLEN', KEYS[1])
local out = {total, 0}
local fields = {}
if #ARGV > 2 then
  for i = 3, math.min(#ARGV, max_fields + 2) do fields[#fields + 1] = ARGV[i] end
elseif total <= max_fields then
  fields = redis.call('HKEYS', KEYS[1])
end
local skipped = 0
for _, f in ipairs(fields) do
  local len = redis.call('HSTRLEN', KEYS[1], f)
  if #f > max_bytes or len > max_bytes then
    skipped = skipped + 1
  else
    local v = redis.call('HGET', KEYS[1], f)
    if v then
      out[#out + 1] = f
      out[#out + 1] = v
    end
  end
end
out[2] = skipped
return out
