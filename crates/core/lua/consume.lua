-- Takes ready jobs of one queue in one slot for several consumers at once
-- (group commit: the consumers of a queue that ask together share a call).
-- Each asks for up to `count` jobs with its own TTR; they are served in the
-- order given. For each job: pop it, spend a try, re-arm it for TTR, and
-- return it, all in this one call. Stale ids (jobs deleted while ready) are
-- popped and skipped.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: the queue's ready list
-- KEYS[5]: queue table
-- ARGV[1]: qualified queue   ARGV[2]: timer channel   ARGV[3]: slot number
-- ARGV[4..]: per consumer, count and ttr ms
-- Returns, per consumer in order: the TTR deadline given to its jobs (ms,
-- shard clock), the number of its jobs, then 9 fields per job:
--   queue, id, elapsed_ms, ttl_ms, tries left, attrs, body, state (3),
--   1 if this is the job's first delivery else 0
local queue = ARGV[1]
local jkey, tkey, ckey, rkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local out = {}
local t = tally()
local qn = qn_of(KEYS[5], queue)
-- The TTR deadlines are armed together: one ZADD, and one announcement if
-- they make the slot due sooner.
local armed, earliest = {}, nil
local total, empty = 0, qn == nil

for w = 4, #ARGV, 2 do
  local want, deadline = tonumber(ARGV[w]), now + tonumber(ARGV[w + 1])
  out[#out + 1] = deadline
  local at = #out + 1
  local got = 0
  out[at] = 0
  while got < want and not empty do
    local id = redis.call('RPOP', rkey)
    if not id then
      empty = true
      break
    end
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
  out[at] = got
  total = total + got
end

if total > 0 then
  local before = zmin(tkey)
  call_many('ZADD', tkey, armed, 2)
  if before == nil or earliest < before then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  t.state(READY, queue, -total)
  t.state(RESERVED, queue, total)
  t.add('C' .. queue, total)
  t.flush(ckey)
end

return out
