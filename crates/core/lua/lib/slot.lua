-- The shared helpers, part 5 of 7: a slot's timers, wheel and lists:
-- arming and dropping jobs, respawn, the consume and peek reply, delayed
-- placement and storage of new jobs. See `record.lua`.

-- Lowest score of a zset, or nil when it is empty.
local function zmin(zkey)
  local head = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if #head == 0 then return nil end
  return tonumber(head[2])
end

-- Schedules `id` on the slot's timer at `at`, and tells the pumps when this
-- makes the slot due sooner than before, so a sleeping pump wakes early.
local function arm(tkey, id, at, timer_channel, slot)
  local before = zmin(tkey)
  redis.call('ZADD', tkey, at, id)
  if before == nil or at < before then
    announce(timer_channel, slot)
  end
end

-- Priorities: a queue's ready jobs of priority 0 wait in its ready list
-- (`rkey`); those of priority p > 0 in the list `<rkey>:<p>`, one per
-- level in use, whose levels are the members of the zset `<rkey>:p`
-- (score p). A non-empty level list always has its member; a member may
-- outlive its list (emptied by `unlist`) until a consume finds the list
-- empty and removes it. A queue that never used a priority has neither, and
-- costs what it cost before: one read of a missing zset per consume.
local function ready_list(rkey, p)
  if p == 0 then return rkey end
  return rkey .. ':' .. p
end

-- The zset of a queue's levels in use (`rkey`: its ready list).
local function levels_key(rkey)
  return rkey .. ':p'
end

-- Marks level `p` (> 0) of the queue of ready list `rkey` in use.
local function mark_level(rkey, p)
  redis.call('ZADD', levels_key(rkey), p, p)
end

-- Takes level `p` (> 0), whose list is empty, out of the queue's levels.
local function unmark_level(rkey, p)
  redis.call('ZREM', levels_key(rkey), p)
end

-- Lists ready job `id` of priority `p`: at the back of its level (the
-- newest end), or at the front (`front`: next to be consumed).
local function push_ready(rkey, id, p, front)
  local cmd = 'LPUSH'
  if front then cmd = 'RPUSH' end
  if p == 0 then
    redis.call(cmd, rkey, id)
  elseif redis.call(cmd, rkey .. ':' .. p, id) == 1 then
    mark_level(rkey, p)
  end
end

-- The ready lists of a queue in the order consumes take them (its levels
-- in use, highest first, then priority 0), and the priority of each.
local function ready_lists(rkey)
  local lists, levels = {}, {}
  for _, p in ipairs(redis.call('ZREVRANGE', levels_key(rkey), 0, -1)) do
    lists[#lists + 1], levels[#levels + 1] = rkey .. ':' .. p, tonumber(p)
  end
  lists[#lists + 1], levels[#levels + 1] = rkey, 0
  return lists, levels
end

-- Removes every ready list of a queue, and its levels.
local function drop_ready(rkey)
  for _, l in ipairs(ready_lists(rkey)) do redis.call('DEL', l) end
  redis.call('DEL', levels_key(rkey))
end

-- Removes a job record and its timer entry or its expiry in the wheel
-- (`unplace_expiry`; not looked for with `r.timed`: the caller knows it
-- is on the timer), its key (`unkey`), and its usage (`r.raw`: its
-- record when `r` is not decoded; with a tally `t`, the usage is
-- gathered there). Its entry in a ready or dead list, if it has one, is
-- for the caller: scripts that popped it have nothing left to remove, and
-- the others call `unlist`.
local function drop(jkey, tkey, ckey, id, r, t)
  unkey(jkey, id, r.raw or r, r.queue)
  redis.call('HDEL', jkey, id)
  redis.call('ZREM', tkey, id)
  if (r.state == READY or r.state == DEAD) and not r.timed then
    local expire = r.expire
    if r.raw then expire = select(4, head(r.raw)) end
    unplace_expiry(tkey, id, expire)
  end
  count(ckey, r.state, r.queue, -1)
  local bytes = job_bytes(id, r.raw or r)
  if t then t.use(r.queue, -1, -bytes) else use(ckey, r.queue, -1, -bytes) end
end

-- After `drop` of a READY or DEAD job, removes its id from that state's list
-- (`lkey`: the queue's ready or dead list; a ready job of priority `p` > 0
-- is in that level's list), so that no list keeps ids of jobs that are gone:
-- - when the slot holds no other job of the queue in that state, every id
--   left in the list is stale: the list goes (for READY, every level's);
-- - else the id is looked for within UNLIST_SCAN entries of either end (ids
--   are pushed at the head and popped at the tail: a job that expires is
--   among the oldest, a job cancelled soon after its publish among the
--   newest) and removed; then stale ids at the tail are popped (at most
--   UNLIST_TRIM). An id further in stays until a consumer pops and skips
--   it, or until every older job of the list has left and the tail reaches
--   it, or the list goes.
-- LREM alone would scan up to the whole list: 3.7 ms for an id 100,000
-- entries in; the scan here is bounded, and each pop removes garbage.
local UNLIST_SCAN = 256
local UNLIST_TRIM = 10000
local function unlist(lkey, jkey, ckey, state, queue, id, p)
  local left = tonumber(redis.call('HGET', ckey, COUNTER[state] .. queue) or '0')
  if left <= 0 then
    if state == READY then drop_ready(lkey) else redis.call('DEL', lkey) end
    return
  end
  local base = lkey
  if state == READY then lkey = ready_list(lkey, p or 0) end
  if redis.call('LPOS', lkey, id, 'RANK', -1, 'MAXLEN', UNLIST_SCAN) then
    redis.call('LREM', lkey, -1, id)
  elseif redis.call('LPOS', lkey, id, 'MAXLEN', UNLIST_SCAN) then
    redis.call('LREM', lkey, 1, id)
  end
  for _ = 1, UNLIST_TRIM do
    local tail = redis.call('LINDEX', lkey, -1)
    if not tail then break end
    local raw = redis.call('HGET', jkey, tail)
    if raw and decode(raw).state == state then break end
    redis.call('RPOP', lkey)
  end
  -- A priority's list that this emptied leaves the queue's levels.
  if state == READY and (p or 0) > 0 and redis.call('EXISTS', lkey) == 0 then
    unmark_level(base, p)
  end
end

-- Removes job `id` (record `r`, of `queue`) in whatever state it is: its
-- record, its timer entry or expiry in the wheel, its count, and its entry in the queue's ready
-- list (`rkey`) or dead list (`dkey`). For delete and republish.
local function remove(jkey, tkey, ckey, rkey, dkey, queue, id, r)
  r.queue = queue
  drop(jkey, tkey, ckey, id, r)
  if r.state == READY then
    unlist(rkey, jkey, ckey, READY, queue, id, r.priority)
  elseif r.state == DEAD then
    unlist(dkey, jkey, ckey, DEAD, queue, id)
  end
end

-- Makes dead job `id` (record `r`, of `r.queue`) ready again, at the
-- back of its priority's ready list (`rkey`'s `ready_list`), with one try and a TTL of
-- `ttl` ms (0 = never expires). Its entry in the dead list is for the
-- caller (popped already, or `unlist`ed after).
local function respawn(jkey, tkey, ckey, rkey, id, r, ttl, now)
  count(ckey, DEAD, r.queue, -1)
  unplace_expiry(tkey, id, r.expire)
  r.state, r.tries, r.expire, r.died, r.due = READY, 1, 0, false, now
  if ttl > 0 then r.expire = now + ttl end
  redis.call('HSET', jkey, id, encode(r))
  count(ckey, READY, r.queue, 1)
  push_ready(rkey, id, r.priority or 0)
  arm_expiry(tkey, id, r, now)
end

local function ttl_left(r, now)
  if r.expire == 0 then return 0 end
  return r.expire - now
end

-- The reply shape of peek:
-- {queue, id, elapsed_ms, ttl_ms (0 = no expiry), tries, attrs, body, state,
--  deliveries so far, last failure's reason ("" for none), priority}
local function view(r, id, now)
  return { r.queue, id, math.max(0, now - r.pub), ttl_left(r, now), r.tries, r.attrs, r.body, r.state,
           r.delivery, r.reason, r.priority }
end

-- When the slot's pump must next wake: its earliest timer entry, or
-- SECOND_MS before its earliest wheel second starts; nil when it has neither.
local function next_wake(tkey, skey)
  local t = zmin(tkey)
  local s = zmin(skey)
  if s then s = s - SECOND_MS end
  if t and s then return math.min(t, s) end
  return t or s
end

-- Places a delayed job due at `due`: on the timer when it is near, else in
-- the wheel list of its second. `k` holds the slot's keys {t, s, prefix};
-- `wake` is the slot's next wake-up before this call (updated and
-- returned), and the pumps are told when this job makes it sooner.
local function delay(k, id, due, now, wake, timer_channel, slot_tag)
  local at
  if due < now + NEAR_MS then
    redis.call('ZADD', k.t, due, id)
    at = due
  else
    local second = math.floor(due / SECOND_MS)
    redis.call('RPUSH', k.prefix .. 'w:' .. second, id)
    redis.call('ZADD', k.s, second * SECOND_MS, second)
    at = second * SECOND_MS - SECOND_MS
  end
  if wake == nil or at < wake then
    announce(timer_channel, slot_tag)
    return at
  end
  return wake
end

-- Stores a new job: delayed (see `delay`), or ready at the tail of its
-- queue, with its expiry armed (`expiries`; the pumps told when it makes
-- the slot's next wake-up sooner, so that a pump asleep until its idle
-- check drops it on time). `wake` as for `delay`; nil makes it read.
local function put(k, rkey, id, r, now, wake, timer_channel, slot_tag)
  redis.call('HSET', k.j, id, encode(r))
  if r.state == DELAYED then
    return delay(k, id, r.due, now, wake, timer_channel, slot_tag)
  end
  push_ready(rkey, id, r.priority or 0)
  if r.expire > 0 then
    -- Its expiry, which wakes a sleeping pump as a due time does.
    local before = wake or next_wake(k.t, k.s)
    local at = place_expiry(k.t, id, r, now)
    if before == nil or at < before then
      announce(timer_channel, slot_tag)
      return at
    end
    return before
  end
  return wake
end

-- A fresh record for publish and republish.
local function fresh(queue, qn, delay_ms, ttl, tries, now)
  local r = { tries = tries, pub = now, expire = 0, due = 0, queue = queue, qn = qn, state = READY }
  if ttl > 0 then r.expire = now + ttl end
  if delay_ms > 0 then r.state, r.due = DELAYED, now + delay_ms end
  return r
end

-- Gives fresh record `r` its retry policy (packed; "" for none): a record
-- with one is extended from its publish.
local function with_policy(r, policy)
  if policy ~= '' then
    r.ext, r.delivery, r.policy, r.reason = true, 0, policy, ''
  end
end

-- Walks a list from its consuming end (the right), skipping entries whose
-- record is gone or no longer in `state`; returns the first live id and record.
local function first_live(jkey, lkey, state, now, max_scan)
  for i = 1, max_scan do
    local id = redis.call('LINDEX', lkey, -i)
    if not id then return nil end
    local raw = redis.call('HGET', jkey, id)
    if raw then
      local r = decode(raw)
      if r.state == state and not expired(r, now) then return id, r end
    end
  end
  return nil
end
