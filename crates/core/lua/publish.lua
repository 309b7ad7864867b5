-- Publishes one or more jobs of one queue into one slot, all or nothing.
-- KEYS[1]: jobs hash     KEYS[2]: timer zset     KEYS[3]: counters hash
-- KEYS[4]: ready list of the queue               KEYS[5]: wheel slot index zset
-- KEYS[6]: queue table
-- ARGV[1]: qualified queue (`<ns>/<queue>`)   ARGV[2]: delay ms   ARGV[3]: ttl ms (0 = never)   ARGV[4]: tries
-- ARGV[5]: ready channel of the queue   ARGV[6]: timer channel   ARGV[7]: slot number
-- ARGV[8]: slot key prefix (wheel lists are prefix .. 'w:' .. second)
-- ARGV[9..]: triples of job id, attributes JSON ("" for none), body
-- Returns: the number of jobs published, or an error reply `EXISTS <id>` and no change.
local queue, delay_ms, ttl, tries = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local first = 9

for i = first, #ARGV, 3 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    return redis.error_reply('EXISTS ' .. ARGV[i])
  end
end

local now = now_ms()
local k = { j = KEYS[1], t = KEYS[2], s = KEYS[5], prefix = ARGV[8] }
local n = (#ARGV - first + 1) / 3
local r = fresh(queue, qn_make(KEYS[6], queue), delay_ms, ttl, tries, now)
local wake
if r.state == DELAYED then wake = next_wake(k.t, k.s) end
for i = first, #ARGV, 3 do
  r.attrs, r.body = ARGV[i + 1], ARGV[i + 2]
  wake = put(k, KEYS[4], ARGV[i], r, now, wake, ARGV[6], ARGV[7])
end

count(KEYS[3], r.state, queue, n)
total(KEYS[3], 'P', queue, n)
if r.state == READY then redis.call('PUBLISH', ARGV[5], n) end
return n
