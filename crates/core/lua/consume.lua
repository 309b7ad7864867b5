-- Takes ready jobs of one queue in one slot for several consumers at once
-- (group commit: the consumers of a queue that ask together share a call).
-- Each asks for up to `count` jobs with its own TTR; they are served in the
-- order given. For each job: pop it, spend a try, re-arm it for TTR, and
-- return it, all in this one call. Stale ids (jobs deleted while ready) are
-- popped and skipped; expired jobs are popped and deleted.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: the queue's ready list
-- KEYS[5]: queue table
-- ARGV[1]: qualified queue   ARGV[2]: timer channel   ARGV[3]: slot number
-- ARGV[4..]: per consumer, count and ttr ms
-- Returns: the time of the call (ms, shard clock), then per consumer in
-- order: the TTR deadline given to its jobs (ms, shard clock), the number
-- of its jobs, then per job its id and its record as it was before this
-- call (the caller unpacks it: this call spent one try and set it
-- reserved). Only the records' leading fields are read here, and every
-- write is made once for the call: one HSET of the reserved records, one
-- ZADD of their deadlines, one HDEL and ZREM of the expired.
local queue = ARGV[1]
local jkey, tkey, ckey, rkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local out = { now }
local t = tally()
local qn = qn_of(KEYS[5], queue)
local records, armed, expired_ids, seen = {}, {}, {}, {}
local earliest = nil
local total, empty = 0, qn == nil

for w = 4, #ARGV, 2 do
  local want, deadline = tonumber(ARGV[w]), now + tonumber(ARGV[w + 1])
  -- As text once: Redis formats a number given to redis.call on every use.
  local deadline_s = string.format('%d', deadline)
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
    -- An id listed twice is taken once (its record is written at the end).
    local raw = not seen[id] and redis.call('HGET', jkey, id)
    if raw then
      local st, q, tries, expire = head(raw)
      if st == READY and q == qn then
        seen[id] = true
        if expire > 0 and expire <= now then
          expired_ids[#expired_ids + 1] = id
          t.state(READY, queue, -1)
        else
          records[#records + 1] = id
          records[#records + 1] = patch(raw, RESERVED, tries - 1, true)
          local due, due_s = deadline, deadline_s
          if expire > 0 and expire < due then due, due_s = expire, string.format('%d', expire) end
          armed[#armed + 1] = due_s
          armed[#armed + 1] = id
          if earliest == nil or due < earliest then earliest = due end
          out[#out + 1] = id
          out[#out + 1] = raw
          got = got + 1
        end
      end
    end
  end
  out[at] = got
  total = total + got
end

call_many('HDEL', jkey, expired_ids, 1)
call_many('ZREM', tkey, expired_ids, 1)
if total > 0 then
  call_many('HSET', jkey, records, 2)
  local before = zmin(tkey)
  call_many('ZADD', tkey, armed, 2)
  if before == nil or earliest < before then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  t.state(READY, queue, -total)
  t.state(RESERVED, queue, total)
  t.add('C' .. queue, total)
end
t.flush(ckey)
return out
