-- Deletes a batch of a queue's ready jobs over the buckets this shard holds
-- (lmstfy's destroy: delayed, reserved and dead jobs are kept).
-- KEYS[4b-3..4b] for b = 1..nb: jobs hash, timer zset, counters hash, ready list
-- ARGV[1]: nb   ARGV[2]: batch limit (list entries popped, stale ones included)
-- Returns: {entries popped, jobs deleted}; call again while entries popped > 0.
local nb, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local popped, deleted = 0, 0
for b = 1, nb do
  local k = bucket_keys(b, 4)
  while popped < limit do
    local id = redis.call('RPOP', k[4])
    if not id then break end
    popped = popped + 1
    local raw = redis.call('HGET', k[1], id)
    if raw then
      local r = decode(raw)
      if r.state == READY then
        drop(k[1], k[2], k[3], id, r)
        deleted = deleted + 1
      end
    end
  end
end
return { popped, deleted }
