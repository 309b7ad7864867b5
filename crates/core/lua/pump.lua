-- Moves what is due in one slot: delayed jobs to ready; reservations whose
-- TTR ran out back to ready while tries remain, else to the dead letter; jobs
-- past their TTL dropped (with their ready or dead list entry); stale timer
-- entries removed.
-- First, wheel seconds that start within SLOT_MS are opened: their delayed
-- jobs move to the timer zset at their exact due time.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: wheel index zset
-- KEYS[5]: the slot's lease   KEYS[6]: queue table
-- ARGV[1]: slot key prefix (ready list = prefix .. 'r:' .. queue, dead list = prefix .. 'd:' .. queue,
--          wheel list = prefix .. 'w:' .. second)
-- ARGV[2]: batch limit   ARGV[3]: ready channel prefix (channel = prefix .. queue)
-- ARGV[4]: the lease owner this pump acts for ("" = no lease, a single pump)
-- Returns: {processed, to_ready, retried, dead, expired, next_due_ms (-1 = none), oldest_due_ms (-1 = none), now_ms,
--   then per queue touched: queue, to_ready, retried, dead, expired},
-- or {-1} and no change when ARGV[4] names an owner that does not hold the
-- lease (fencing: a pump that lost its lease moves nothing, even once).
-- where oldest_due_ms is the score of the first entry handled (for lag).
--
-- The ready, dead and wheel lists are named here rather than passed in KEYS
-- because which queues and seconds are due is only known from the data.
-- They carry the same hash tag as KEYS[1], so the script still touches one
-- Redis Cluster hash slot (a cluster allows this for keys of the slot that
-- the script's KEYS name).
-- Counters are gathered per queue and written once per call (`tally`).
local prefix, limit, chan = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if ARGV[4] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[4] then
  return { -1 }
end
local now = now_ms()
local jkey, tkey, ckey, skey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local qname = qnames(KEYS[6])

-- Open the wheel seconds that start within SLOT_MS.
local opened = 0
while opened < limit do
  local head = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
  if #head == 0 or tonumber(head[2]) >= now + SLOT_MS then break end
  local wkey = prefix .. 'w:' .. head[1]
  local ids = redis.call('LPOP', wkey, limit - opened)
  if ids then
    for _, id in ipairs(ids) do
      local raw = redis.call('HGET', jkey, id)
      if raw then
        local r = decode(raw)
        if r.state == DELAYED then redis.call('ZADD', tkey, r.due, id) end
      end
    end
    opened = opened + #ids
  end
  if redis.call('EXISTS', wkey) == 0 then redis.call('ZREM', skey, head[1]) end
end
if opened >= limit then
  -- A huge second: come back at once for the rest before pumping.
  return { limit, 0, 0, 0, 0, now, -1, now }
end

local due = redis.call('ZRANGEBYSCORE', tkey, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local to_ready, retried, dead, gone = 0, 0, 0, 0
local woken = {}
local counts = tally()
local per = {}
local function tally(queue, i)
  local t = per[queue]
  if not t then t = { 0, 0, 0, 0 }; per[queue] = t end
  t[i] = t[i] + 1
end
local oldest = -1
if #due > 0 then oldest = tonumber(due[2]) end

for i = 1, #due, 2 do
  local id = due[i]
  local raw = redis.call('HGET', jkey, id)
  if not raw then
    redis.call('ZREM', tkey, id)
  else
    local r = decode(raw)
    r.queue = qname(r.qn)
    if expired(r, now) then
      counts.flush(ckey)
      drop(jkey, tkey, ckey, id, r)
      if r.state == READY then
        unlist(prefix .. 'r:' .. r.queue, jkey, ckey, READY, r.queue, id)
      elseif r.state == DEAD then
        unlist(prefix .. 'd:' .. r.queue, jkey, ckey, DEAD, r.queue, id)
      end
      gone = gone + 1
      tally(r.queue, 4)
    elseif r.state == DELAYED or (r.state == RESERVED and r.tries > 0) then
      if r.state == RESERVED then
        retried = retried + 1
        tally(r.queue, 2)
      else
        to_ready = to_ready + 1
        tally(r.queue, 1)
      end
      counts.state(r.state, r.queue, -1)
      r.state = READY
      redis.call('HSET', jkey, id, patch(raw, READY, r.tries, r.delivered))
      counts.state(READY, r.queue, 1)
      redis.call('LPUSH', prefix .. 'r:' .. r.queue, id)
      arm_expiry(tkey, id, r)
      woken[r.queue] = (woken[r.queue] or 0) + 1
    elseif r.state == RESERVED then
      counts.state(RESERVED, r.queue, -1)
      r.state = DEAD
      redis.call('HSET', jkey, id, patch(raw, DEAD, r.tries, r.delivered))
      counts.state(DEAD, r.queue, 1)
      redis.call('LPUSH', prefix .. 'd:' .. r.queue, id)
      arm_expiry(tkey, id, r)
      dead = dead + 1
      tally(r.queue, 3)
    else
      -- ready or dead: only an expiry is ever scheduled for these states.
      arm_expiry(tkey, id, r)
    end
  end
end

counts.flush(ckey)
for q, n in pairs(woken) do
  redis.call('PUBLISH', chan .. q, n)
end

local next_due = next_wake(tkey, skey) or -1
local out = { #due / 2, to_ready, retried, dead, gone, next_due, oldest, now }
for q, t in pairs(per) do
  out[#out + 1] = q
  for i = 1, 4 do out[#out + 1] = t[i] end
end
return out
