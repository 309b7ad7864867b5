-- Publishes the jobs of several publications of one queue into one slot in
-- one call (group commit): each publication (a request: one job, or a bulk
-- of many) is all or nothing on its own, and one that fails changes nothing
-- for the others.
-- KEYS[1]: jobs hash     KEYS[2]: timer zset     KEYS[3]: counters hash
-- KEYS[4]: ready list of the queue               KEYS[5]: wheel index zset
-- KEYS[6]: queue table
-- ARGV[1]: qualified queue (`<ns>/<queue>`)   ARGV[2]: ready channel of the queue
-- ARGV[3]: timer channel   ARGV[4]: slot number
-- ARGV[5]: slot key prefix (wheel lists are prefix .. 'w:' .. second)
-- ARGV[6..]: publications, each: delay ms, ttl ms (0 = never), tries, n, then
--   n triples of job id, attributes JSON ("" for none), body
-- Returns: per publication, the number of jobs it published, or 0 when one
-- of its ids exists already (then none of its jobs was stored).
local queue = ARGV[1]
local now = now_ms()
local k = { j = KEYS[1], t = KEYS[2], s = KEYS[5], prefix = ARGV[5] }
local qn = qn_make(KEYS[6], queue)
local out = {}
local counts = tally()
local ready = 0
local wake, woke = nil, false
local i = 6
while i <= #ARGV do
  local delay_ms, ttl, tries, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
    tonumber(ARGV[i + 3])
  local first, last = i + 4, i + 3 + 3 * n
  local clash = false
  for j = first, last, 3 do
    if redis.call('HEXISTS', KEYS[1], ARGV[j]) == 1 then clash = true; break end
  end
  if clash then
    out[#out + 1] = 0
  else
    local r = fresh(queue, qn, delay_ms, ttl, tries, now)
    if r.state == DELAYED and not woke then
      wake, woke = next_wake(k.t, k.s), true
    end
    for j = first, last, 3 do
      r.attrs, r.body = ARGV[j + 1], ARGV[j + 2]
      wake = put(k, KEYS[4], ARGV[j], r, now, wake, ARGV[3], ARGV[4])
    end
    counts.state(r.state, queue, n)
    counts.add('P' .. queue, n)
    if r.state == READY then ready = ready + n end
    out[#out + 1] = n
  end
  i = last + 1
end

counts.flush(KEYS[3])
if ready > 0 then redis.call('PUBLISH', ARGV[2], ready) end
return out
