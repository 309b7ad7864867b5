-- Replaces a job by a new one in the same slot, atomically: the old job
-- (if it still exists in that queue) is deleted and the new one published.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: ready list
-- KEYS[5]: wheel index zset   KEYS[6]: queue table   KEYS[7]: dead list
-- KEYS[8]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: qualified queue   ARGV[2]: delay ms   ARGV[3]: ttl ms   ARGV[4]: tries
-- ARGV[5]: ready channel   ARGV[6]: timer channel   ARGV[7]: slot number   ARGV[8]: slot key prefix
-- ARGV[9]: old job id   ARGV[10]: new job id   ARGV[11]: attrs   ARGV[12]: body
-- ARGV[13]: retry policy (packed, "" for none)   ARGV[14]: priority (0 to 255)
-- Returns: 1 when the old job existed, else 0; or an error reply `EXISTS <id>` and no change.
local queue, delay_ms, ttl, tries = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local old, id = ARGV[9], ARGV[10]
if redis.call('HEXISTS', KEYS[1], id) == 1 then
  return redis.error_reply('EXISTS ' .. id)
end
local existed = 0
local raw = redis.call('HGET', KEYS[1], old)
if raw then
  local o = decode(raw)
  if o.qn == qn_of(KEYS[6], queue) then
    remove(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], queue, old, o)
    existed = 1
  end
end
local now = now_ms()
local k = { j = KEYS[1], t = KEYS[2], s = KEYS[5], prefix = ARGV[8] }
local r = fresh(queue, qn_make(KEYS[6], queue), delay_ms, ttl, tries, now)
r.attrs, r.body, r.priority = ARGV[11], ARGV[12], tonumber(ARGV[14])
with_policy(r, ARGV[13])
local wake
if r.state == DELAYED then wake = next_wake(k.t, k.s) end
put(k, KEYS[4], id, r, now, wake, ARGV[6], ARGV[7])
count(KEYS[3], r.state, queue, 1)
use(KEYS[3], queue, 1, job_bytes(id, r))
total(KEYS[3], 'P', queue, 1)
if r.state == READY then announce(ARGV[5], 1) end
return existed
