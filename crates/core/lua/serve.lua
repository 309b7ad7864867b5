-- Serves the workers of one queue in one slot in one call (group commit):
-- the acks (deletes by id, of jobs in any state), the touches (a reserved
-- job's TTR counted again from now) and the consumes that arrived together. A worker acks one job and asks for the next, so the
-- two come together, and one call for both costs Redis one script call's
-- fixed work (the call, its clock, its counters) where two cost twice.
-- Acks go first, each deleted or not found on its own; then the touches;
-- then the consumers
-- are served in the order given, each up to `count` jobs with its own
-- TTR: a job is popped, spends a try and is re-armed for its TTR. Stale ids
-- (jobs deleted while ready) are popped and skipped; expired jobs are
-- popped and deleted.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's ready list (priority 0's; `ready_lists` names the
--          others)   KEYS[5]: the queue's dead list   KEYS[6]: queue table
-- KEYS[7]: transit hash (jobs on their way to another shard: `move_out.lua`)
-- KEYS[8]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: qualified queue   ARGV[2]: timer channel   ARGV[3]: slot number
-- ARGV[4]: the number of acks, a   ARGV[5]: the number of touches, h
-- ARGV[6..5+2a]: per ack, its job id and its fence: the delivery it acks,
--   or 0 for none (lmstfy's ack)
-- ARGV[6+2a..5+2a+3h]: per touch, its job id, its fence and its TTR ms
-- ARGV[6+2a+3h..]: per consumer, count and ttr ms
-- Returns: the time of the call (ms, shard clock); per ack, the state the
-- job was in (1..4), 0 when no such job exists in that queue (an id given
-- twice is found the first time only), or -1 when its fence refused it
-- (the job is not reserved by that delivery; nothing changed); per touch,
-- the job's new deadline (ms, shard clock: now + TTR, or its expiry when
-- sooner), or 0 (no such job), -1 (its fence refused it), -2 (the job is
-- in transit to another shard: retry) or -3 (the job is not reserved);
-- then per consumer in order:
-- the TTR deadline given to its jobs (ms, shard clock), the number of its
-- jobs, then per job its id and its record as it was before this call (the
-- caller unpacks it: this call spent one try, set it reserved and counted
-- one more delivery: `deliver`).
-- Records are read with one HMGET per round and only their leading fields
-- are unpacked; ready ids are popped with one RPOP per round; each kind of
-- write is made once for the call: one HDEL and ZREM of the acked, one of
-- the expired, one HDEL per wheel second of the expiries that leave it
-- (`unplace_expiry`), one HSET of the reserved records, one ZADD of their
-- deadlines.
local queue = ARGV[1]
local jkey, tkey, ckey, rkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local out = { now }
local qn = qn_of(KEYS[6], queue)
local t = tally()
-- Ready and dead jobs that leave that state here, per wheel second of
-- their expiry (`unplace_expiry`).
local unplaced = {}

local acks, touches = tonumber(ARGV[4]), tonumber(ARGV[5])
-- Where the touches and the consumers start in ARGV.
local touch_at = 6 + 2 * acks
local want_at = touch_at + 3 * touches
-- Every consumer's count and TTR, read before anything is written.
local counts, ttrs, wanted = {}, {}, 0
for w = want_at, #ARGV, 2 do
  local count, ttr = tonumber(ARGV[w]), tonumber(ARGV[w + 1])
  if not count or not ttr then
    return redis.error_reply('serve: a count or TTR is not a number')
  end
  counts[#counts + 1], ttrs[#ttrs + 1] = count, ttr
  wanted = wanted + count
end

-- Whether ack `x` (1-based) may delete the job of record `raw`: an ack
-- without a fence (0) deletes it in any state; one fenced on delivery N
-- only while the job is reserved by that delivery.
local function unfenced(x, raw)
  local fence = tonumber(ARGV[5 + 2 * x])
  if fence == 0 then return true end
  return string.byte(raw, 1) % 8 == RESERVED and delivery_of(raw) == fence
end

-- The acks: ack x has its id at ARGV[4 + 2x] and its fence after it, and
-- its answer at out[1 + x].
if acks > 0 then
  local ids, listed, gone = {}, {}, {}
  -- The bytes of the jobs acked (all of `queue`: one usage change).
  local acked_bytes = 0
  local raws = {}
  if qn then
    local uniq, seen = {}, {}
    for x = 1, acks do
      local id = ARGV[4 + 2 * x]
      if not seen[id] then
        seen[id] = true
        uniq[#uniq + 1] = id
      end
    end
    local found = hmget_many(jkey, uniq)
    for y = 1, #uniq do raws[uniq[y]] = found[y] end
  end
  for x = 1, acks do
    local id = ARGV[4 + 2 * x]
    local raw = not gone[id] and raws[id]
    local state = 0
    if raw then
      local st, q, _, expire = head(raw)
      if q ~= qn then
        state = 0
      elseif not unfenced(x, raw) then
        state = -1
      else
        state = st
        gone[id] = true
        ids[#ids + 1] = id
        unkey(jkey, id, raw, queue)
        t.state(st, queue, -1)
        acked_bytes = acked_bytes + #id + #raw
        if st == READY or st == DEAD then
          listed[#listed + 1] = { x, priority_of(raw) }
          unplace_expiry(tkey, id, expire, unplaced)
        end
      end
    end
    out[#out + 1] = state
  end
  if #ids > 0 then
    t.add('A' .. queue, #ids)
    t.use(queue, -#ids, -acked_bytes)
    call_many('HDEL', jkey, ids, 1)
    call_many('ZREM', tkey, ids, 1)
    -- `unlist` reads the counters: they must be written first.
    t.flush(ckey)
    for _, l in ipairs(listed) do
      local x = l[1]
      local st = out[1 + x]
      local lkey = rkey
      if st == DEAD then lkey = KEYS[5] end
      unlist(lkey, jkey, ckey, st, queue, ARGV[4 + 2 * x], l[2])
    end
  end
  -- A job that a mover took out of the slot is deleted in transit: its
  -- entry becomes a mark, and the mover deletes the copy it may have made.
  -- Looked for only when an ack found no job here (the common ack costs
  -- nothing more).
  if #ids < acks and redis.call('EXISTS', KEYS[7]) == 1 then
    for x = 1, acks do
      local id = ARGV[4 + 2 * x]
      if out[1 + x] == 0 and not gone[id] then
        local v = redis.call('HGET', KEYS[7], id)
        local e = v and transit_unpack(v)
        if e and e.queue == queue then
          if unfenced(x, e.raw) then
            redis.call('HSET', KEYS[7], id, transit_acked(e))
            total(ckey, 'A', queue, 1)
            use(ckey, queue, -1, -job_bytes(id, e.raw))
            out[1 + x] = head(e.raw)
            gone[id] = true
          else
            out[1 + x] = -1
          end
        end
      end
    end
  end
end

-- The touches, each on its own: a job reserved (by the delivery its fence
-- names, if it names one) gets `now + TTR` as its deadline (its expiry
-- when that is sooner), as consume gave it.
local touched, soonest = {}, nil
for x = 1, touches do
  local at = touch_at + 3 * (x - 1)
  local id, fence, ttr = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local raw = qn and redis.call('HGET', jkey, id)
  local answer = 0
  if raw then
    local st, q, _, expire = head(raw)
    if q ~= qn or (expire > 0 and expire <= now) then
      -- Another queue's job, or one past its TTL that the pump is about
      -- to drop: not found either way.
      answer = 0
    elseif st ~= RESERVED then
      answer = -3
      if fence > 0 then answer = -1 end
    elseif fence > 0 and delivery_of(raw) ~= fence then
      answer = -1
    else
      answer = now + ttr
      if expire > 0 and expire < answer then answer = expire end
      touched[#touched + 1] = string.format('%d', answer)
      touched[#touched + 1] = id
      if soonest == nil or answer < soonest then soonest = answer end
    end
  elseif redis.call('EXISTS', KEYS[7]) == 1 then
    local v = redis.call('HGET', KEYS[7], id)
    local e = v and transit_unpack(v)
    if e and e.queue == queue then answer = -2 end
  end
  out[#out + 1] = answer
end
if soonest then
  local before = zmin(tkey)
  call_many('ZADD', tkey, touched, 2)
  if before == nil or soonest < before then announce(ARGV[2], ARGV[3]) end
end

-- The consumes: first the ready jobs they take, in list order (the
-- queue's priority levels, highest first, then priority 0: `ready_lists`),
-- then who gets which.
-- Per job taken: id, record, tries and expiry.
local taken, raws, tries_of, expire_of = {}, {}, {}, {}
local expired_ids, popped = {}, {}
-- The bytes of the ready jobs found expired.
local expired_bytes = 0
local lists, levels, l = {}, {}, 1
if qn and wanted > 0 then lists, levels = ready_lists(rkey) end
while #taken < wanted and l <= #lists do
  local n = math.min(wanted - #taken, 1000)
  local ids = redis.call('RPOP', lists[l], n) or {}
  if #ids < n then
    -- This list is empty now: on to the next level (an empty level
    -- goes from the queue's levels).
    if levels[l] > 0 then unmark_level(rkey, levels[l]) end
    l = l + 1
  end
  -- An id listed twice is taken once: its record is written at the end,
  -- so its second entry would still read as ready.
  local fresh = {}
  for _, id in ipairs(ids) do
    if not popped[id] then
      popped[id] = true
      fresh[#fresh + 1] = id
    end
  end
  if #fresh > 0 then
    local found = hmget_many(jkey, fresh)
    for x = 1, #fresh do
      local raw = found[x]
      if raw then
        local st, q, tries, expire = head(raw)
        if st == READY and q == qn then
          if expire > 0 and expire <= now then
            expired_ids[#expired_ids + 1] = fresh[x]
            unplace_expiry(tkey, fresh[x], expire, unplaced)
            unkey(jkey, fresh[x], raw, queue, now)
            t.state(READY, queue, -1)
            expired_bytes = expired_bytes + #fresh[x] + #raw
          else
            local j = #taken + 1
            taken[j], raws[j], tries_of[j], expire_of[j] = fresh[x], raw, tries, expire
            unplace_expiry(tkey, fresh[x], expire, unplaced)
          end
        end
      end
    end
  end
end

local records, armed = {}, {}
-- The bytes the taken records grew by (`deliver`).
local grown = 0
local earliest = nil
local next_job = 1
for c = 1, #counts do
  local deadline = now + ttrs[c]
  -- As text once: Redis formats a number given to redis.call on every use.
  local deadline_s = string.format('%d', deadline)
  out[#out + 1] = deadline
  local got = math.min(counts[c], #taken - next_job + 1)
  out[#out + 1] = got
  for j = next_job, next_job + got - 1 do
    local id, raw, expire = taken[j], raws[j], expire_of[j]
    records[#records + 1] = id
    local record, grew = deliver(raw, tries_of[j] - 1)
    records[#records + 1] = record
    grown = grown + grew
    local due, due_s = deadline, deadline_s
    if expire > 0 and expire < due then due, due_s = expire, string.format('%d', expire) end
    armed[#armed + 1] = due_s
    armed[#armed + 1] = id
    if earliest == nil or due < earliest then earliest = due end
    out[#out + 1] = id
    out[#out + 1] = raw
  end
  next_job = next_job + got
end

unplace_all(tkey, unplaced)
call_many('HDEL', jkey, expired_ids, 1)
call_many('ZREM', tkey, expired_ids, 1)
if #expired_ids > 0 then t.use(queue, -#expired_ids, -expired_bytes) end
if #taken > 0 then
  hset_many(jkey, records)
  local before = zmin(tkey)
  call_many('ZADD', tkey, armed, 2)
  if before == nil or earliest < before then
    announce(ARGV[2], ARGV[3])
  end
  t.state(READY, queue, -#taken)
  t.state(RESERVED, queue, #taken)
  t.add('C' .. queue, #taken)
  if grown > 0 then t.use(queue, 0, grown) end
end
t.flush(ckey)
return out
