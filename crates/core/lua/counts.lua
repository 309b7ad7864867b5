-- Counts a queue's live jobs per state over the buckets this shard holds.
-- KEYS[b]: counters hash of bucket b
-- ARGV[1]: queue
-- Returns: {delayed, ready, reserved, dead, published total, delivered total}
local q = ARGV[1]
local fields = { 'l' .. q, 'r' .. q, 'f' .. q, 'd' .. q, 'P' .. q, 'C' .. q }
local totals = { 0, 0, 0, 0, 0, 0 }
for b = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[b], unpack(fields))
  for i = 1, #fields do totals[i] = totals[i] + (tonumber(v[i]) or 0) end
end
return totals
