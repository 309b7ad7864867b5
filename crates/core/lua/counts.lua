-- Counts a queue's live jobs per state over the buckets this shard holds.
-- KEYS[b]: counters hash of bucket b
-- ARGV[1]: queue
-- Returns: {delayed, ready, reserved, dead}
local totals = { 0, 0, 0, 0 }
local fields = { 'l' .. ARGV[1], 'r' .. ARGV[1], 'f' .. ARGV[1], 'd' .. ARGV[1] }
for b = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[b], fields[1], fields[2], fields[3], fields[4])
  for i = 1, 4 do totals[i] = totals[i] + (tonumber(v[i]) or 0) end
end
return totals
