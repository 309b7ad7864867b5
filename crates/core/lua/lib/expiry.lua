-- The shared helpers, part 4 of 7: the expiry wheel, where ready and dead
-- jobs' far expiries wait. See `record.lua`.

-- The expiry wheel. A ready or dead job's expiry that is near (within
-- NEAR_MS) goes on the slot's timer; a later one waits in the expiry hash of
-- its wheel second, `e:<second>` (id → ms into that second), whose second
-- is in the wheel index as a delayed job's is. The pump opens it with the
-- second's wheel list, SECOND_MS before the second starts, and puts each
-- entry whose job still has that expiry on the timer at its exact time.
-- So the timer zset holds what is due soon and the reservations, not the
-- expiries of a whole backlog: what a publish or consume does for an
-- expiry is O(1), whatever the backlog (measured: docs/BENCHMARKS.md,
-- "Priorities").
-- Every key of a slot shares the prefix of its timer key (`sd:T:`).
local function slot_prefix(tkey)
  return string.sub(tkey, 1, -2)
end

-- When the pump must wake for an expiry at `expire` armed at `now`: at the
-- expiry when it is near, else SECOND_MS before its wheel second starts.
local function expiry_wake(expire, now)
  if expire < now + NEAR_MS then return expire end
  return math.floor(expire / SECOND_MS) * SECOND_MS - SECOND_MS
end

-- Gathers expiries to arm (`add(id, expire)`, each of a job that has no
-- timer entry) and writes them once per key (`write()`: one ZADD of the
-- near ones, one HSET per wheel second of the others), returning the
-- earliest wake they need (`expiry_wake`), or nil when none was added.
-- `k` holds the slot's keys {t, s, prefix}.
local function expiries(k, now)
  local near, far, seconds, soonest = {}, {}, {}, nil
  local self = {}
  function self.add(id, expire)
    local at
    if expire < now + NEAR_MS then
      near[#near + 1] = expire
      near[#near + 1] = id
      at = expire
    else
      local second = math.floor(expire / SECOND_MS)
      local l = far[second]
      if not l then
        l = {}
        far[second] = l
        seconds[#seconds + 1] = second
      end
      l[#l + 1] = id
      l[#l + 1] = expire - second * SECOND_MS
      at = second * SECOND_MS - SECOND_MS
    end
    if soonest == nil or at < soonest then soonest = at end
  end
  function self.write()
    call_many('ZADD', k.t, near, 2)
    for _, second in ipairs(seconds) do
      hset_many(k.prefix .. 'e:' .. second, far[second])
      redis.call('ZADD', k.s, second * SECOND_MS, second)
    end
    local at = soonest
    near, far, seconds, soonest = {}, {}, {}, nil
    return at
  end
  return self
end

-- Arms the expiry of ready or dead job `id` (record `r`) that has no timer
-- entry: see `expiries`. Returns the wake it needs, or nil for none.
local function place_expiry(tkey, id, r, now)
  if r.expire == 0 then return nil end
  local prefix = slot_prefix(tkey)
  local ex = expiries({ t = tkey, s = prefix .. 's', prefix = prefix }, now)
  ex.add(id, r.expire)
  return ex.write()
end

-- Takes wheel second `second` out of the wheel index when it holds
-- neither expiries nor delayed jobs any more, so that the pump does not
-- wake for it (a slot whose jobs were consumed or replaced costs nothing
-- until its next job).
local function leave_if_empty(prefix, second)
  if redis.call('EXISTS', prefix .. 'e:' .. second, prefix .. 'w:' .. second) == 0 then
    redis.call('ZREM', prefix .. 's', second)
  end
end

-- Removes `ids` from the expiry hash of wheel second `second`, and the
-- second from the index when that empties it (`leave_if_empty`).
local function unplace_second(prefix, second, ids)
  local ekey, removed = prefix .. 'e:' .. second, 0
  for i = 1, #ids, 1000 do
    removed = removed + redis.call('HDEL', ekey, unpack(ids, i, math.min(i + 999, #ids)))
  end
  if removed > 0 then leave_if_empty(prefix, second) end
end

-- Takes the expiry `expire` of ready or dead job `id` out of its wheel
-- second, where it is unless the second was opened (then it is on the
-- timer: the caller's to remove). Ids are gathered per second in `g`
-- (second → ids) when given, for `unplace_all`.
local function unplace_expiry(tkey, id, expire, g)
  if expire == 0 then return end
  local second = math.floor(expire / SECOND_MS)
  if g then
    local l = g[second]
    if not l then
      l = {}
      g[second] = l
    end
    l[#l + 1] = id
  else
    unplace_second(slot_prefix(tkey), second, { id })
  end
end

-- Removes the ids gathered by `unplace_expiry` from their wheel seconds.
local function unplace_all(tkey, g)
  local prefix = slot_prefix(tkey)
  for second, ids in pairs(g) do unplace_second(prefix, second, ids) end
end

-- After jobs were made ready with a TTL of `ttl` ms from `now`: tells the
-- pumps when their expiry needs them sooner than the slot's next wake-up
-- before them (`before`, `next_wake`), so that a pump asleep until its
-- idle check drops them on time.
local function announce_expiry(before, now, ttl, timer_channel, slot)
  if ttl > 0 and (before == nil or expiry_wake(now + ttl, now) < before) then
    announce(timer_channel, slot)
  end
end

-- The timer entry a job that may have one (a due time, a deadline, a near
-- expiry) needs in a state that has no due time of its own (ready or
-- dead): its expiry (see `expiries`), or none. Returns the wake it needs,
-- or nil.
local function arm_expiry(tkey, id, r, now)
  if r.expire > 0 and r.expire < now + NEAR_MS then
    redis.call('ZADD', tkey, r.expire, id)
    return r.expire
  end
  redis.call('ZREM', tkey, id)
  return place_expiry(tkey, id, r, now)
end
