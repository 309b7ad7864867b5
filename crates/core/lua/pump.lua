-- Moves what is due in one slot: delayed jobs to ready; reservations whose
-- TTR ran out back to ready while tries remain, else to the dead letter,
-- with the reason "ttr expired"; jobs
-- past their TTL dropped (with their ready or dead list entry); stale timer
-- entries removed.
-- First, wheel seconds that start within SECOND_MS are opened (about three
-- quarters of `limit` entries): their delayed jobs move to the timer zset
-- at their exact due time, or straight to ready when they are due already,
-- and so do the expiries of ready and dead jobs that wait in them.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: wheel index zset
-- KEYS[5]: the slot's lease   KEYS[6]: queue table   KEYS[7]: the slot's fire zset (read only: its
-- first fire is returned, and `fire.lua` fires it)   KEYS[8]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: slot key prefix (ready list = prefix .. 'r:' .. queue, or its
--          priority's `ready_list`; dead list = prefix .. 'd:' .. queue,
--          wheel list = prefix .. 'w:' .. second, expiry hash = prefix .. 'e:' .. second)
-- ARGV[2]: batch limit   ARGV[3]: ready channel prefix (channel = prefix .. queue)
-- ARGV[4]: the lease owner this pump acts for ("" = no lease, a single pump)
-- Returns: {processed (wheel entries opened, one per wheel second that held
--   none, + timer entries handled), to_ready, retried, dead, expired,
--   next_due_ms (-1 = none; now when a wheel second holds more: come back at once), oldest_due_ms (-1 = none), now_ms,
--   next_fire_ms (the slot's first planned fire of a schedule, -1 = none),
--   then per queue touched: queue, to_ready, retried, dead, expired},
-- or {-1} and no change when ARGV[4] names an owner that does not hold the
-- lease (fencing: a pump that lost its lease moves nothing, even once).
-- where oldest_due_ms is the earliest due time among the jobs handled (for lag).
--
-- The ready, dead and wheel lists are named here rather than passed in KEYS
-- because which queues and seconds are due is only known from the data.
-- They carry the same hash tag as KEYS[1], so the script still touches one
-- Redis Cluster hash slot (a cluster allows this for keys of the hash slot
-- that the script's KEYS name), and the guard (KEYS[8]) keeps the script
-- from starting while a cluster moves that hash slot, when one of these
-- lists could be on the other node.
-- Counters are gathered per queue and written once per call (`tally`).
local prefix, limit, chan = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if ARGV[4] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[4] then
  return { -1 }
end
local now = now_ms()
local jkey, tkey, ckey, skey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local qname = qnames(KEYS[6])

local to_ready, retried, dead, gone = 0, 0, 0, 0
local woken = {}
local counts = tally()
local per = {}
local function tally(queue, i, n)
  local t = per[queue]
  if not t then t = { 0, 0, 0, 0 }; per[queue] = t end
  t[i] = t[i] + (n or 1)
end
local oldest = -1
local function seen_due(at)
  if oldest == -1 or at < oldest then oldest = at end
end

-- The writes are gathered and made once per key at the end (`write`), or
-- sooner when large records pile up (FLUSH_BYTES): one HSET of the changed
-- records, one LPUSH per ready or dead list (in the order the jobs were
-- handled: due order for timer entries, list order for a wheel second
-- opened late), one ZADD of the timer entries to set, one ZREM of those
-- that leave the timer and one HSET per wheel second of the far expiries
-- (`expiries`). Jobs past their TTL are removed after that, one by
-- one, as they touch their lists (`unlist`). Records are read with HMGET, 100 at a time, and only
-- their leading fields (`head`).
local records, lists, list_order, armed, unarmed, expired_jobs = {}, {}, {}, {}, {}, {}
-- Bytes of records rewritten since the last write. Past FLUSH_BYTES the
-- writes are made at once (`each_record`), so that a call over large
-- bodies holds a bounded amount of Lua memory rather than a batch of
-- records and their rewritten copies.
local FLUSH_BYTES = 4 * 1024 * 1024
-- The reason a reservation whose TTR ran out records.
local TTR_EXPIRED = 'ttr expired'
local pending = 0
-- A level list pushed to (`ready_list`) → its queue's ready list and level,
-- so that `write` records the level in use.
local levels = {}
local function push(lkey, id)
  local l = lists[lkey]
  if not l then
    l = {}
    lists[lkey] = l
    list_order[#list_order + 1] = lkey
  end
  l[#l + 1] = id
end
local function set_timer(id, at)
  armed[#armed + 1] = string.format('%d', at)
  armed[#armed + 1] = id
end
-- Far expiries, armed in their wheel seconds (`expiries`) when `write` runs.
local ex = expiries({ t = tkey, s = skey, prefix = prefix }, now)
-- The timer entry a job keeps in a state without a due time of its own:
-- its expiry, near on the timer and far in its wheel second, or none (as
-- `arm_expiry`, gathered). `timed`: whether it has an entry now.
local function rearm(id, expire, timed)
  if expire > 0 and expire < now + NEAR_MS then
    set_timer(id, expire)
    return
  end
  if expire > 0 then ex.add(id, expire) end
  if timed then unarmed[#unarmed + 1] = id end
end
local function expire_job(id, raw, st, queue)
  expired_jobs[#expired_jobs + 1] = { id, st, queue, raw }
  gone = gone + 1
  tally(queue, 4)
end
-- Moves a job from state `st` to `to` (READY or DEAD): its record, its
-- counts, the head of its list (`list`: 'r:' or 'd:'), its timer entry.
local function move(id, raw, st, to, list, queue, tries, expire, delivered, timed)
  counts.state(st, queue, -1)
  counts.state(to, queue, 1)
  records[#records + 1] = id
  local record
  if to == DEAD then
    record = patch_dead(raw, tries, now)
  elseif st == RESERVED then
    record = patch_retry(raw, tries, delivered, now)
  else
    record = patch(raw, to, tries, delivered)
  end
  if st == RESERVED then
    -- Its TTR ran out: the reason it failed.
    record = with_reason(record, TTR_EXPIRED)
    if #record ~= #raw then counts.use(queue, 0, #record - #raw) end
  end
  records[#records + 1] = record
  pending = pending + #record
  local lkey = prefix .. list .. queue
  if to == READY then
    local p = priority_of(raw)
    if p > 0 then
      levels[lkey .. ':' .. p] = { lkey, p }
      lkey = lkey .. ':' .. p
    end
  end
  push(lkey, id)
  rearm(id, expire, timed)
end
-- A reservation whose TTR ran out, with tries left, made ready again.
local function retry_now(id, raw, queue, tries, expire, delivered)
  retried = retried + 1
  tally(queue, 2)
  move(id, raw, RESERVED, READY, 'r:', queue, tries, expire, delivered, true)
  woken[queue] = (woken[queue] or 0) + 1
end
-- A delayed job made ready: the path most moved jobs take, kept short
-- (a quarter less of the script's own time per job than going through
-- `move`, measured inside the script on 1,000 jobs).
-- Its counts are gathered per queue in `readied` (the jobs, the ready
-- list's key, that list's pending pushes) and applied once per write
-- (`settle_ready`).
local readied = {}
local function ready_delayed(id, raw, queue, tries, expire, delivered, timed)
  local q = readied[queue]
  if not q then
    q = { 0, prefix .. 'r:' .. queue }
    readied[queue] = q
  end
  q[1] = q[1] + 1
  local record = patch(raw, READY, tries, delivered)
  local n = #records
  records[n + 1], records[n + 2] = id, record
  pending = pending + #record
  local p = priority_of(raw)
  if p > 0 then
    local lkey = q[2]
    levels[lkey .. ':' .. p] = { lkey, p }
    push(lkey .. ':' .. p, id)
  elseif q[3] then
    q[3][#q[3] + 1] = id
  else
    push(q[2], id)
    q[3] = lists[q[2]]
  end
  rearm(id, expire, timed)
end
local function settle_ready()
  for queue, q in pairs(readied) do
    local n = q[1]
    counts.state(DELAYED, queue, -n)
    counts.state(READY, queue, n)
    to_ready = to_ready + n
    tally(queue, 1, n)
    woken[queue] = (woken[queue] or 0) + n
  end
  readied = {}
end
-- A reservation whose TTR ran out with tries left, as its retry policy
-- says: dead past the policy's retry bound; delayed by its backoff (on the
-- timer, or in its wheel second when far); else ready again at once.
local function retry(id, raw, queue, tries, expire, delivered)
  local policy = policy_of(raw)
  if past_retry(policy, struct.unpack('>I6', raw, 4), now) then
    move(id, raw, RESERVED, DEAD, 'd:', queue, tries, expire, delivered, true)
    dead = dead + 1
    tally(queue, 3)
    return
  end
  local wait = retry_delay(policy, delivery_of(raw))
  if not wait or wait <= 0 then
    retry_now(id, raw, queue, tries, expire, delivered)
    return
  end
  local due = now + wait
  counts.state(RESERVED, queue, -1)
  counts.state(DELAYED, queue, 1)
  local record = with_reason(patch_delayed(raw, tries, due), TTR_EXPIRED)
  if #record ~= #raw then counts.use(queue, 0, #record - #raw) end
  records[#records + 1] = id
  records[#records + 1] = record
  pending = pending + #record
  if due < now + NEAR_MS then
    set_timer(id, due)
  else
    local second = math.floor(due / SECOND_MS)
    redis.call('RPUSH', prefix .. 'w:' .. second, id)
    redis.call('ZADD', skey, second * SECOND_MS, second)
    unarmed[#unarmed + 1] = id
  end
  retried = retried + 1
  tally(queue, 2)
end
local function write()
  settle_ready()
  hset_many(jkey, records)
  for _, lkey in ipairs(list_order) do
    call_many('LPUSH', lkey, lists[lkey], 1)
    local level = levels[lkey]
    if level then mark_level(level[1], level[2]) end
  end
  call_many('ZADD', tkey, armed, 2)
  call_many('ZREM', tkey, unarmed, 1)
  ex.write()
  counts.flush(ckey)
  for _, e in ipairs(expired_jobs) do
    local id, st, queue = e[1], e[2], e[3]
    -- Off the wheel already: it came due on the timer, or its second was opened.
    drop(jkey, tkey, ckey, id, { state = st, queue = queue, raw = e[4], timed = true }, counts)
    if st == READY then
      unlist(prefix .. 'r:' .. queue, jkey, ckey, READY, queue, id, priority_of(e[4]))
    elseif st == DEAD then
      unlist(prefix .. 'd:' .. queue, jkey, ckey, DEAD, queue, id)
    end
  end
  -- The usage of the jobs that expired (gathered by `drop`).
  counts.flush(ckey)
  for q, n in pairs(woken) do
    announce(chan .. q, n)
  end
  records, lists, list_order, armed, unarmed, expired_jobs, woken = {}, {}, {}, {}, {}, {}, {}
  pending = 0
end
-- Calls `handle(id, raw)` for each of `ids` (raw: its record, or false),
-- reading the records 100 at a time, and writes whenever FLUSH_BYTES of
-- rewritten records are pending.
local function each_record(ids, handle)
  for c = 1, #ids, 100 do
    local part = {}
    for x = c, math.min(c + 99, #ids) do part[#part + 1] = ids[x] end
    local raws = hmget_many(jkey, part)
    for y = 1, #part do
      handle(part[y], raws[y])
      if pending >= FLUSH_BYTES then write() end
    end
  end
end

-- Opens up to `n` entries of the expiry hash `ekey` of wheel second
-- `second` (see `expiries` in `lua/lib/expiry.lua`): a job still ready or
-- dead with that expiry goes on the timer at it, or goes at once when it
-- passed (a second opened late); other entries are stale and skipped.
-- A hash larger than `n` gives `n` of its entries, chosen at random
-- (HRANDFIELD: O(n)). Returns the entries opened.
local function open_expiries(ekey, second, n)
  local len = redis.call('HLEN', ekey)
  if len == 0 then return 0 end
  local kv
  if len <= n then
    kv = redis.call('HGETALL', ekey)
    redis.call('DEL', ekey)
  else
    kv = redis.call('HRANDFIELD', ekey, n, 'WITHVALUES')
  end
  local base, ids, at = tonumber(second) * SECOND_MS, {}, {}
  for x = 1, #kv, 2 do
    ids[#ids + 1] = kv[x]
    at[kv[x]] = base + tonumber(kv[x + 1])
  end
  if len > n then call_many('HDEL', ekey, ids, 1) end
  each_record(ids, function(id, raw)
    if not raw then return end
    local st, qn, _, expire = head(raw)
    if (st ~= READY and st ~= DEAD) or expire ~= at[id] then return end
    if expire <= now then
      expire_job(id, raw, st, qname(qn))
    else
      set_timer(id, expire)
    end
  end)
  return #ids
end

-- Open the wheel seconds that start within SECOND_MS. A job of an opened
-- second goes on the timer at its due time; one that is due already (the
-- pump is behind: a backlog, or a second opened late) goes straight to
-- ready, and one past its TTL goes, without passing through the timer.
-- Then the second's expiries (`open_expiries`). A second leaves the wheel
-- index once both its list and its expiry hash are empty. Opening takes
-- about three quarters of the batch, leaving the timer at least one entry
-- from a batch of 2 on (`wheel_limit`; a second that held
-- nothing counts one, so that a run of empty seconds is bounded too): the
-- rest is the timer's, so that a huge second (a bulk's delayed jobs or
-- expiries) does not hold up due reservations and delayed jobs over the
-- calls it takes to open.
local wheel_limit = math.max(1, limit - math.max(1, math.floor(limit / 4)))
local opened = 0
-- An id listed twice (in one second, or in two opened together) is
-- handled once: its record is rewritten only when this call writes.
local listed = {}
while opened < wheel_limit do
  local first = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) >= now + SECOND_MS then break end
  local wkey, ekey = prefix .. 'w:' .. first[1], prefix .. 'e:' .. first[1]
  local was = opened
  local ids = redis.call('LPOP', wkey, wheel_limit - opened)
  if ids then
    each_record(ids, function(id, raw)
      if not raw or listed[id] then return end
      listed[id] = true
      local st, qn, tries, expire, delivered, at = head(raw)
      if st ~= DELAYED then return end
      if expire > 0 and expire <= now then
        expire_job(id, raw, st, qname(qn))
      elseif at <= now then
        seen_due(at)
        ready_delayed(id, raw, qname(qn), tries, expire, delivered, false)
      else
        set_timer(id, at)
      end
    end)
    opened = opened + #ids
  end
  if opened < wheel_limit then
    opened = opened + open_expiries(ekey, first[1], wheel_limit - opened)
  end
  if redis.call('EXISTS', wkey, ekey) == 0 then redis.call('ZREM', skey, first[1]) end
  if opened == was then opened = opened + 1 end
end
-- Seconds left to open now: the pump comes back at once.
local more = opened >= wheel_limit

-- The ids alone, half the reply to convert; the first one's due time
-- (the earliest) read on its own.
local ids = {}
if limit > opened then
  ids = redis.call('ZRANGEBYSCORE', tkey, '-inf', now, 'LIMIT', 0, limit - opened)
end
if #ids > 0 then seen_due(tonumber(redis.call('ZSCORE', tkey, ids[1]))) end
each_record(ids, function(id, raw)
  if not raw then
    unarmed[#unarmed + 1] = id
    return
  end
  local st, qn, tries, expire, delivered = head(raw)
  local queue = qname(qn)
  if expire > 0 and expire <= now then
    expire_job(id, raw, st, queue)
  elseif st == DELAYED then
    ready_delayed(id, raw, queue, tries, expire, delivered, true)
  elseif st == RESERVED and tries > 0 then
    retry(id, raw, queue, tries, expire, delivered)
  elseif st == RESERVED then
    move(id, raw, st, DEAD, 'd:', queue, tries, expire, delivered, true)
    dead = dead + 1
    tally(queue, 3)
  else
    -- ready or dead: only an expiry is ever scheduled for these states.
    rearm(id, expire, true)
  end
end)
write()

local next_due = next_wake(tkey, skey) or -1
if more then next_due = now end
local out = { opened + #ids, to_ready, retried, dead, gone, next_due, oldest, now, zmin(KEYS[7]) or -1 }
for q, t in pairs(per) do
  out[#out + 1] = q
  for i = 1, 4 do out[#out + 1] = t[i] end
end
return out
