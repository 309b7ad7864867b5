-- Gives a reserved job back, in one of two ways:
-- - a worker's release (nack): the job waits `delay` ms (delayed, or at
--   the back of its ready list when 0) with its try spent or given back,
--   and its reason recorded; a release that leaves no try sends it to
--   the dead letter instead;
-- - a consume whose client went away before it was answered: the job goes
--   back to the head of its ready list with its try given back.
-- Fenced on a delivery: nothing happens unless the job is reserved, by
-- that delivery when one is named.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: ready list (a job of priority p > 0 goes to its `ready_list`)
-- KEYS[5]: dead list   KEYS[6]: wheel index zset   KEYS[7]: queue table
-- KEYS[8]: transit hash   KEYS[9]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: qualified queue   ARGV[2]: job id   ARGV[3]: fence (a delivery, 0 = none)
-- ARGV[4]: delay ms, or -1 for the job's retry policy's (none: ARGV[13])
-- ARGV[5]: 1 to spend the try, 0 to give it back
-- ARGV[6]: 1 to put the job at the head of its priority's ready list (a
--   consume given back), 0 at its back   ARGV[7]: reason (recorded when ARGV[8] is 1)
-- ARGV[8]: 1 to record the reason, 0 to keep the one the job has
-- ARGV[9]: ready channel   ARGV[10]: timer channel   ARGV[11]: slot number
-- ARGV[12]: slot key prefix
-- ARGV[13]: with ARGV[4] -1, the delay ms of a job without a retry policy
-- Returns: {the job's state now (READY 2, DELAYED 1 or DEAD 4), its delay
-- ms (0 unless delayed)}; or {0} when no such job exists in that queue,
-- {-1} when the fence refused it, {-2} when the job is in transit to
-- another shard (retry), {-3} when it is not reserved.
local queue, id, fence = ARGV[1], ARGV[2], tonumber(ARGV[3])
local delay_ms, spend, front = tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6] == '1'
local jkey, tkey, ckey = KEYS[1], KEYS[2], KEYS[3]
local raw = redis.call('HGET', jkey, id)
if not raw then
  local v = redis.call('HGET', KEYS[8], id)
  local e = v and transit_unpack(v)
  if e and e.queue == queue then return { -2 } end
  return { 0 }
end
local r = decode(raw)
local now = now_ms()
-- A job past its TTL is the pump's to drop: not found, as once it is.
if r.qn ~= qn_of(KEYS[7], queue) or (r.expire > 0 and r.expire <= now) then return { 0 } end
r.queue = queue
if r.state ~= RESERVED then
  if fence > 0 then return { -1 } end
  return { -3 }
end
if fence > 0 and r.delivery ~= fence then return { -1 } end

if not spend then r.tries = r.tries + 1 end
-- A consume given back never reached its client: nor does its delivery
-- count (the next consume hands out the same number).
if front and r.delivery > 0 then
  r.delivery = r.delivery - 1
  -- Back to never delivered: its next consume is its first.
  if r.delivery == 0 then r.delivered = false end
end
if ARGV[8] == '1' then
  r.ext, r.reason = true, ARGV[7]
end
count(ckey, RESERVED, queue, -1)
local slot_keys = { j = jkey, t = tkey, s = KEYS[6], prefix = ARGV[12] }
if delay_ms < 0 then delay_ms = retry_delay(r.policy, r.delivery) or tonumber(ARGV[13]) end
-- The slot's next wake-up before this call (read only when the job has an
-- expiry or a delay): a pump asleep until then is told when the job's
-- expiry or due time needs it sooner.
local wake
if r.expire > 0 or delay_ms > 0 then wake = next_wake(tkey, KEYS[6]) end
local at
if r.tries == 0 or (spend and past_retry(r.policy, r.pub, now)) then
  r.state, r.died, r.due = DEAD, true, now
  redis.call('LPUSH', KEYS[5], id)
  at = arm_expiry(tkey, id, r, now)
elseif delay_ms > 0 then
  r.state, r.due = DELAYED, now + delay_ms
  redis.call('ZREM', tkey, id)
  delay(slot_keys, id, r.due, now, wake, ARGV[10], ARGV[11])
else
  r.state, r.due = READY, now
  push_ready(KEYS[4], id, r.priority, front)
  at = arm_expiry(tkey, id, r, now)
  announce(ARGV[9], 1)
end
if at and (wake == nil or at < wake) then announce(ARGV[10], ARGV[11]) end
local record = encode(r)
redis.call('HSET', jkey, id, record)
count(ckey, r.state, queue, 1)
if #record ~= #raw then use(ckey, queue, 0, #record - #raw) end
if r.state ~= DELAYED then delay_ms = 0 end
return { r.state, delay_ms }
