-- Reads the next ready job of a queue over the buckets this shard holds,
-- without changing anything: the oldest live head among the buckets.
-- KEYS[2b-1], KEYS[2b] for b = 1..nb: jobs hash, ready list of the queue
-- ARGV[1]: nb   ARGV[2]: how many stale entries to skip per bucket at most
-- Returns: {queue, id, elapsed_ms, ttl_ms, tries left, attrs, body, state}, or nil.
local nb, max_scan = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local best_id, best
for b = 1, nb do
  local k = bucket_keys(b, 2)
  local id, r = first_live(k[1], k[2], READY, now, max_scan)
  if id and (best == nil or r.pub < best.pub or (r.pub == best.pub and id < best_id)) then
    best_id, best = id, r
  end
end
if not best then return nil end
return view(best, best_id, now)
