-- Takes up to `count` ready jobs of one queue in one slot: for each job, pop
-- it, spend a try, re-arm it for TTR, and return it, all in this one call.
-- Stale ids (jobs deleted while ready) are popped and skipped.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: the queue's ready list
-- KEYS[5]: queue table
-- ARGV[1]: qualified queue   ARGV[2]: count   ARGV[3]: ttr ms   ARGV[4]: timer channel   ARGV[5]: slot number
-- Returns: a flat array of deliveries, 9 fields each:
--   queue, id, elapsed_ms, ttl_ms, tries left, attrs, body, state (3),
--   1 if this is the job's first delivery else 0
-- and, last, the TTR deadline given to every job (ms, shard clock).
local queue, want, ttr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local jkey, tkey, ckey, rkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local deadline = now + ttr
local out, got = {}, 0
local t = tally()
local qn = qn_of(KEYS[5], queue)
-- The TTR deadlines are armed together: one ZADD, and one announcement if
-- they make the slot due sooner.
local armed, earliest = {}, nil

while got < want do
  local id = redis.call('RPOP', rkey)
  if not id then break end
  local raw = redis.call('HGET', jkey, id)
  if raw then
    local r = decode(raw)
    r.queue = queue
    if r.state == READY and r.qn == qn then
      if expired(r, now) then
        t.flush(ckey)
        drop(jkey, tkey, ckey, id, r)
      else
        local first = not r.delivered
        r.state, r.tries = RESERVED, r.tries - 1
        redis.call('HSET', jkey, id, patch(raw, RESERVED, r.tries, true))
        local due = deadline
        if r.expire > 0 and r.expire < due then due = r.expire end
        armed[#armed + 1] = due
        armed[#armed + 1] = id
        if earliest == nil or due < earliest then earliest = due end
        local v = view(r, id, now)
        for _, f in ipairs(v) do out[#out + 1] = f end
        if first then out[#out + 1] = 1 else out[#out + 1] = 0 end
        got = got + 1
      end
    end
  end
end

if got > 0 then
  local before = zmin(tkey)
  redis.call('ZADD', tkey, unpack(armed))
  if before == nil or earliest < before then
    redis.call('PUBLISH', ARGV[4], ARGV[5])
  end
  t.state(READY, queue, -got)
  t.state(RESERVED, queue, got)
  t.add('C' .. queue, got)
  t.flush(ckey)
end

out[#out + 1] = deadline
return out
