-- Fires the due schedules of one slot (see `lua/lib/fires.lua`): each due
-- planned fire publishes its schedule's job (ready at once, or written
-- ahead: below), with the
-- schedule's name and the fire's time as attributes (`schedule`,
-- `scheduled-at`), and the schedule's next planned fire is armed, in this
-- one script, fenced by the slot's lease. A planned fire whose job id is
-- stored already (a plan replayed) publishes nothing. A fire found later
-- than its grace after it was due (`n`) is missed: nothing more of that
-- schedule fires now, its plan is emptied, and the pumps plan it again,
-- as its policy for missed fires says. A schedule left with one planned
-- fire or none is asked to be planned; one left with none waits for its
-- plan REPLAN_MS at a time. A schedule whose job has an idempotency key
-- publishes it with the key (as a publish does: `lua/lib/keys.lua`); a
-- fire while the key names a job (or its window is open) publishes
-- nothing, and counts as a duplicate. A namespace that the pump holds to
-- a quota stores no more jobs and bytes than the pump admitted for it in
-- this call: a schedule whose fire does not fit what is left waits
-- ROOM_WAIT_MS (its fire zset entry moved, nothing else written) for the
-- pump to admit it again; one the pump refused fires nothing now: its due
-- fires are handled and count as refused.
-- A planned fire that comes due within ARGV[7] ms is written ahead: its
-- job is stored now as a delayed job, due at the fire's due time, which
-- the slot's timer makes ready as it does any delayed job (`pump.lua`).
-- So the work of a fire is done before its time, and what is left at that
-- time is the timer's move to ready, a fraction of it: many fires due at
-- one instant are ready together. Such a job counts from its fire's due
-- time, as if published then (its `elapsed_ms` and TTL). A schedule whose
-- job has an idempotency key is not written ahead: its key is checked at
-- the fire's time, as a publish then would check it (its fire zset entry
-- is scored `ahead` after its due time, as the pumps call `ahead` before
-- an entry's score).
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: wheel index zset
-- KEYS[5]: the slot's lease   KEYS[6]: queue table   KEYS[7]: fire zset
-- KEYS[8]: definitions hash   KEYS[9]: fire states hash
-- KEYS[10]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: slot key prefix (a queue's ready lists are named from it, as
--          in `pump.lua`)   ARGV[2]: the most fires to publish
-- ARGV[3]: ready channel prefix (channel = prefix .. queue)
-- ARGV[4]: the lease owner this pump acts for ("" = no lease)
-- ARGV[5]: timer channel   ARGV[6]: slot number (the timer channel's message)
-- ARGV[7]: how far ahead (ms) a fire is written (0: only when due)
-- ARGV[8..]: triples of a namespace held to a quota, and the jobs and
--   bytes the pump admitted for it in this call (jobs -1: refused); a
--   namespace not named is not held (one named twice: its first triple).
-- Returns {-1} and no change when ARGV[4] does not hold the lease, else
--   {fired, next_fire_ms (-1: none; now when more are due within ARGV[7]
--    ms than the call could fire), now_ms, ready_ms (the earliest due
--    time of the jobs written ahead, when the slot's timer must make the
--    first ready; -1: none), the number of jobs written ahead, n, then
--    n quintuples (member, rev, cursor, timing, key) of schedules to
--    plan, m, then m lateness values (ms after due, one per fire
--    published), h, then h triples (namespace, jobs, bytes) of what each
--    held namespace's fires stored, then per queue fired into: queue,
--    fires published, fires a key answered, fires a quota refused}.
local prefix, limit, chan, ahead = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[7])
if ARGV[4] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[4] then
  return { -1 }
end
local now = now_ms()
local k = { j = KEYS[1], t = KEYS[2], s = KEYS[4], prefix = prefix }
local fkey, dkey, skey = KEYS[7], KEYS[8], KEYS[9]
local counts = tally()
local fired, more = 0, false
-- Namespace → what is left of what the pump admitted, and what its fires
-- used, for those held to a quota.
local rooms, held = {}, {}
for i = 8, #ARGV, 3 do
  local jobs = tonumber(ARGV[i + 1])
  if not rooms[ARGV[i]] then
    rooms[ARGV[i]] = { refused = jobs < 0, jobs = jobs, bytes = tonumber(ARGV[i + 2]), used_jobs = 0,
                       used_bytes = 0 }
    held[#held + 1] = ARGV[i]
  end
end
-- How long a schedule whose fire finds no room waits for the pump to
-- admit it again: its entry is scored `ahead` later, as the pumps call
-- `ahead` before an entry's score.
local ROOM_WAIT_MS = 25
local room_wait_at = now + ROOM_WAIT_MS + ahead
-- Whether schedule `member`'s namespace has nothing left of what the pump
-- admitted for it.
local function no_room(member)
  local room = rooms[string.match(member, '^[^/]+')]
  return room ~= nil and not room.refused and room.jobs < 1
end
local lateness, replan, per, qns = {}, {}, {}, {}
-- Writes gathered over the call and made once per key at the end, as a
-- publish of many jobs makes them: job records, ready ids per list, their
-- expiries (`expiries`), timer entries of the jobs written ahead, fire
-- states and fire zset entries.
local records, ready, lists, ex, expiring = {}, {}, {}, expiries(k, now), false
local texts, arms, key_sets, timers = {}, {}, {}, {}
-- The earliest due time of the jobs written ahead (nil: none), and how
-- many were.
local ready_at, written_ahead = nil, 0
-- Key index field → the id it names (false: none), as this call found or
-- made it.
local claimed = {}
-- One record template and packer per kind of job (queue, TTL, tries,
-- priority, policy): schedules alike share one.
local kinds = {}

-- The fires of `queue` published, answered by a key, and refused by a
-- quota, so far, and of those published, the ones ready now.
local function per_queue(queue)
  local n = per[queue]
  if not n then
    n = { 0, 0, 0, 0 }
    per[queue] = n
  end
  return n
end

-- The packer, ready list and priority of the jobs of schedule `d` of `queue`.
local function kind_of(d, queue)
  -- Concatenated, not formatted: Lua 5.1's `%s` stops at a NUL byte, which
  -- a packed policy holds.
  local name = queue .. ' ' .. d.ttl .. ' ' .. d.tries .. ' ' .. d.priority .. ' ' .. d.policy
  local kind = kinds[name]
  if kind then return kind end
  local qn = qns[queue]
  if not qn then
    qn = qn_make(KEYS[6], queue)
    qns[queue] = qn
  end
  local r = fresh(queue, qn, 0, d.ttl, d.tries, now)
  r.priority = d.priority
  with_policy(r, d.policy)
  local list = ready_list(prefix .. 'r:' .. queue, d.priority)
  if not ready[list] then
    ready[list] = {}
    lists[#lists + 1] = { list, prefix .. 'r:' .. queue, d.priority }
  end
  kind = { pack = packer(r), kpack = key_packer(r), qn = qn, expire = r.expire, list = list, policy = d.policy,
           priority = d.priority }
  kinds[name] = kind
  return kind
end

-- The job the key index `field` (of `key`, in `queue`) names, or false.
local function named_by(field, key, queue)
  local was = claimed[field]
  if was == nil then
    was = keys_named(prefix, k.j, queue, { field }, { key }, now)[field] or false
    claimed[field] = was
  end
  return was
end

-- The record of a fire due at `due`, later than now, written ahead: a
-- delayed job that counts from `due` (see the top).
local function ahead_record(d, queue, kind, due, attrs)
  local r = fresh(queue, kind.qn, 0, d.ttl, d.tries, due)
  r.state, r.due, r.priority, r.attrs, r.body = DELAYED, due, kind.priority, attrs, d.body
  with_policy(r, kind.policy)
  return encode(r)
end

-- Publishes fire `at` (due at `due`) of schedule `d` (of `queue`) as job
-- `id`, ready now, or written ahead when it is due later; within its
-- namespace's `room` when it is held to a quota; with an idempotency key
-- that names a job already, publishes nothing. Returns whether it
-- published, or nil when the room has no place for it.
local function publish(d, queue, id, at, due, room)
  local kind = kind_of(d, queue)
  local attrs = d.attrs .. string.format(',"scheduled-at":"%d"}', at)
  local record, field
  if d.key ~= '' then
    field = key_field(kind.qn, d.key)
    if named_by(field, d.key, queue) then return false end
  end
  if due > now then
    record = ahead_record(d, queue, kind, due, attrs)
  elseif d.key == '' then
    record = kind.pack(attrs, d.body)
  else
    local keyend = 0
    if d.window > 0 then keyend = now + d.window end
    record = kind.kpack(d.key, keyend, attrs, d.body)
  end
  local bytes = job_bytes(id, record)
  if room then
    if room.jobs < 1 or bytes > room.bytes then return nil end
    room.jobs, room.bytes = room.jobs - 1, room.bytes - bytes
    room.used_jobs, room.used_bytes = room.used_jobs + 1, room.used_bytes + bytes
  end
  if field then
    key_sets[#key_sets + 1], key_sets[#key_sets + 2] = field, id
    claimed[field] = id
  end
  records[#records + 1], records[#records + 2] = id, record
  local n = per_queue(queue)
  n[1] = n[1] + 1
  if due > now then
    -- Its timer entry; its expiry is armed when it is made ready.
    timers[#timers + 1], timers[#timers + 2] = due, id
    if not ready_at or due < ready_at then ready_at = due end
    written_ahead = written_ahead + 1
    counts.state(DELAYED, queue, 1)
  else
    local ids = ready[kind.list]
    ids[#ids + 1] = id
    if kind.expire > 0 then
      ex.add(id, kind.expire)
      expiring = true
    end
    counts.state(READY, queue, 1)
    n[4] = n[4] + 1
  end
  counts.add('P' .. queue, 1)
  counts.use(queue, 1, bytes)
  return true
end

-- Fires what is due of one schedule's plan; returns whether it was asked
-- to be planned.
local function fire_due(member, d, st)
  local queue = string.match(member, '^[^/]+/[^/]+')
  local room = rooms[string.match(queue, '^[^/]+')]
  local wait = false
  -- How far ahead this schedule's fires are written (none with a key).
  local lead = ahead
  if d.key ~= '' then lead = 0 end
  while st.plan ~= '' and fired < limit do
    local at, due, id, how = planned(st.plan)
    if due > now + lead then break end
    if at > st.cursor then
      if how == 'n' and now - due > d.grace then
        st.plan = ''
        break
      end
      if redis.call('HEXISTS', k.j, id) == 1 then
        -- A plan replayed: this fire's job is stored already.
      elseif room and room.refused then
        local n = per_queue(queue)
        n[3] = n[3] + 1
      else
        local published = publish(d, queue, id, at, due, room)
        -- Nothing left of what was admitted fits it: it waits.
        if published == nil then
          wait = true
          break
        end
        if published then
          fired = fired + 1
          -- Written ahead: on time, as far as this script can tell.
          lateness[#lateness + 1] = math.max(0, now - due)
          st.fired = st.fired + 1
          st.last, st.last_at, st.last_id = string.format('%d', at), string.format('%d', math.max(now, due)), id
        else
          local n = per_queue(queue)
          n[2] = n[2] + 1
        end
      end
      st.cursor = at
    end
    st.plan = plan_rest(st.plan)
  end
  local n = #arms
  if wait then
    arms[n + 1], arms[n + 2] = room_wait_at, member
  elseif st.plan ~= '' then
    local _, due = planned(st.plan)
    arms[n + 1], arms[n + 2] = due + ahead - lead, member
    if due <= now + lead then more = true end
  else
    arms[n + 1], arms[n + 2] = now + REPLAN_MS, member
  end
  texts[#texts + 1], texts[#texts + 2] = member, fire_state_text(st)
  return not string.find(st.plan, ' ', 1, true)
end

local due = redis.call('ZRANGEBYSCORE', fkey, '-inf', now + ahead, 'LIMIT', 0, limit)
local defs, states = hmget_many(dkey, due), hmget_many(skey, due)
for i, member in ipairs(due) do
  local def, raw = defs[i], states[i]
  if not def or not raw then
    redis.call('ZREM', fkey, member)
  elseif no_room(member) then
    local n = #arms
    arms[n + 1], arms[n + 2] = room_wait_at, member
  else
    local d, st = fire_def(def), fire_state(raw)
    if d.paused or st.ended ~= '0' then
      redis.call('ZREM', fkey, member)
    elseif fired >= limit then
      more = true
    elseif fire_due(member, d, st) then
      local n = #replan
      replan[n + 1], replan[n + 2], replan[n + 3], replan[n + 4], replan[n + 5] =
        member, string.format('%d', st.rev), string.format('%d', st.cursor), d.timing, d.key
    end
  end
end
hset_many(k.j, records)
-- Due within `ahead`, nearer than NEAR_MS: on the timer, not the wheel.
-- No pump is told: the one that called this is told by `ready_ms`.
call_many('ZADD', k.t, timers, 2)
hset_many(prefix .. 'k', key_sets)
for _, l in ipairs(lists) do
  local list, rkey, p = l[1], l[2], l[3]
  if #ready[list] > 0 then
    call_many('LPUSH', list, ready[list], 1)
    if p > 0 then mark_level(rkey, p) end
  end
end
if expiring then
  -- Their expiries wake a sleeping pump as due times do, when one needs it
  -- sooner than the slot's next wake-up.
  local before = next_wake(k.t, k.s)
  local at = ex.write()
  if before == nil or at < before then announce(ARGV[5], ARGV[6]) end
end
hset_many(skey, texts)
call_many('ZADD', fkey, arms, 2)
counts.flush(KEYS[3])
for queue, n in pairs(per) do
  if n[4] > 0 then announce(chan .. queue, n[4]) end
end

local next_fire = zmin(fkey) or -1
if more then next_fire = now end
local out = { fired, next_fire, now, ready_at or -1, written_ahead, #replan / 5 }
for _, v in ipairs(replan) do out[#out + 1] = v end
out[#out + 1] = #lateness
for _, v in ipairs(lateness) do out[#out + 1] = v end
out[#out + 1] = #held
for _, ns in ipairs(held) do
  local room = rooms[ns]
  out[#out + 1] = ns
  out[#out + 1] = room.used_jobs
  out[#out + 1] = room.used_bytes
end
for queue, n in pairs(per) do
  out[#out + 1] = queue
  out[#out + 1] = n[1]
  out[#out + 1] = n[2]
  out[#out + 1] = n[3]
end
return out
