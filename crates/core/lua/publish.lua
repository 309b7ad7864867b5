-- Publishes the jobs of several publications of one queue into one slot in
-- one call (group commit): each publication (a request: one job, or a bulk
-- of many) is all or nothing on its own, and one that fails changes nothing
-- for the others.
-- KEYS[1]: jobs hash     KEYS[2]: timer zset     KEYS[3]: counters hash
-- KEYS[4]: ready list of the queue (priority 0's; `ready_list` names the
--          others)                                KEYS[5]: wheel index zset
-- KEYS[6]: queue table   KEYS[7]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: qualified queue (`<ns>/<queue>`)   ARGV[2]: ready channel of the queue
-- ARGV[3]: timer channel   ARGV[4]: slot number
-- ARGV[5]: slot key prefix (wheel lists are prefix .. 'w:' .. second)
-- ARGV[6..]: publications, each: delay ms, ttl ms (0 = never), tries,
--   priority (0 to 255), retry policy (packed, "" for none), keys ("" for none; else `u` until done,
--   `d` debounce, or `w<ms>` a window), n, then n triples of job id,
--   attributes JSON ("" for none), body, each followed by its key when
--   the publication has keys
-- Returns: per publication, the number of jobs it published, or 0 when one
-- of its ids exists already (then none of its jobs was stored). A
-- publication with keys gets a table instead: that number, then for each
-- job that a key answered (1-based, in order): its place, the id the key
-- names, and `d` (a duplicate: nothing stored) or `r` (debounce: the
-- pending job the key names took this job's body and schedule). See
-- `lua/lib/keys.lua`.
-- Writes are gathered and made once per key at the end (one HSET of every
-- record, one LPUSH of every ready id per priority, one write of their
-- expiries per wheel second (`expiries`), one HSET of the key index), and the ids and keys of every publication are
-- looked up at once (`keys_named`): a call costs a few commands whatever
-- number of jobs it carries. Delayed jobs are placed one by one (`delay`),
-- which keeps the pumps' wake-ups exact; a debounce that replaces a job
-- writes it at once.
local queue = ARGV[1]
local now = now_ms()
local k = { j = KEYS[1], t = KEYS[2], s = KEYS[5], prefix = ARGV[5] }
local qn = qn_make(KEYS[6], queue)

-- Where each publication's jobs start and end, every id once, and the
-- index field of every key.
local pubs, ids, fields, keys = {}, {}, {}, {}
local i = 6
while i <= #ARGV do
  local n = tonumber(ARGV[i + 6])
  local stride = 3
  if ARGV[i + 5] ~= '' then stride = 4 end
  local first, last = i + 7, i + 6 + stride * n
  pubs[#pubs + 1] = { i, first, last, n, stride }
  for j = first, last, stride do
    ids[#ids + 1] = ARGV[j]
    if stride == 4 then
      fields[#fields + 1] = key_field(qn, ARGV[j + 3])
      keys[#keys + 1] = ARGV[j + 3]
    end
  end
  i = last + 1
end
local taken = {}
local found = hmget_many(KEYS[1], ids)
for x = 1, #ids do
  if found[x] then taken[ids[x]] = true end
end
-- What each key names before this call (field → id, and the job's record
-- when it lives here); keys this call gives are added as it goes, so that
-- a key given twice in one call names the first job.
local named, named_job = {}, {}
if #fields > 0 then named, named_job = keys_named(k.prefix, k.j, queue, fields, keys, now) end

local out = {}
-- Ready ids per priority (`ready_list`), and the priorities in order.
local records, ready_ids, ready_levels, key_sets = {}, {}, {}, {}
local ready_count = 0
-- The expiries of the ready jobs (`expiries`), and whether one was added.
local ex, expiring = expiries(k, now), false
local wake, woke = nil, false
-- Publications with the same schedule share their record's fixed fields
-- (the usual case: a call of many single-job publishes): one record
-- template and packer per schedule, not per publication.
local kinds = {}
-- Jobs stored per state, and in all, and their bytes (`job_bytes`); ready
-- jobs written at once (debounce).
local stored, total, bytes, written_ready = {}, 0, 0, 0

-- Gathers the writes of a new job `id` (record `record`, of template `r`).
local function store(id, record, r)
  records[#records + 1] = id
  records[#records + 1] = record
  bytes = bytes + #id + #record
  if r.state == DELAYED then
    wake = delay(k, id, r.due, now, wake, ARGV[3], ARGV[4])
  else
    local p = r.priority
    local level = ready_ids[p]
    if not level then
      level = {}
      ready_ids[p] = level
      ready_levels[#ready_levels + 1] = p
    end
    level[#level + 1] = id
    ready_count = ready_count + 1
    if r.expire > 0 then
      ex.add(id, r.expire)
      expiring = true
    end
  end
end

local function hit(answer, place, id, how)
  local n = #answer
  answer[n + 1], answer[n + 2], answer[n + 3] = place, id, how
end

-- Debounce: job `id` (decoded `old`), delayed and never delivered, takes
-- `job`'s body and schedule and keeps its id, its key and its key's
-- window; written at once. Its place in a wheel list goes too (`drop`
-- takes it off the timer), or the pump would make it ready twice.
local function replace(id, old, job)
  old.queue = queue
  job.keyend = old.keyend
  drop(k.j, k.t, KEYS[3], id, old)
  local second = math.floor(old.due / SECOND_MS)
  if redis.call('LREM', k.prefix .. 'w:' .. second, 0, id) > 0 then leave_if_empty(k.prefix, second) end
  wake = put(k, KEYS[4], id, job, now, wake, ARGV[3], ARGV[4])
  redis.call('HSET', k.prefix .. 'k', key_field(qn, job.key), id)
  count(KEYS[3], job.state, queue, 1)
  use(KEYS[3], queue, 1, job_bytes(id, job))
  if job.state == READY then written_ready = written_ready + 1 end
end

-- A new job of a debounce publication, written at once, so that a later
-- publication of this call with its key finds it and replaces it.
local function put_now(id, job, field)
  wake = put(k, KEYS[4], id, job, now, wake, ARGV[3], ARGV[4])
  redis.call('HSET', k.prefix .. 'k', field, id)
  bytes = bytes + job_bytes(id, job)
  if job.state == READY then written_ready = written_ready + 1 end
end

-- The jobs `first`..`last` of a publication with keys (`spec`, see above),
-- of record template `r`. Returns the publication's answer: the jobs
-- stored, then per job that a key answered: place, id, `d` or `r`.
local function keyed(r, kpack, spec, first, last)
  local answer, place = { 0 }, 0
  local mode, window = string.sub(spec, 1, 1), 0
  if mode == 'w' then window = tonumber(string.sub(spec, 2)) end
  local keyend = 0
  if window > 0 then keyend = now + window end
  -- The decoded record of job `j` (debounce writes it at once).
  local function job_of(j, key)
    return { tries = r.tries, pub = now, expire = r.expire, due = r.due, queue = queue, qn = qn,
             state = r.state, priority = r.priority, ext = true, delivery = 0, policy = r.policy or '',
             reason = '', key = key, keyend = keyend, attrs = ARGV[j + 1], body = ARGV[j + 2] }
  end
  for j = first, last, 4 do
    place = place + 1
    local id, key = ARGV[j], ARGV[j + 3]
    local field = key_field(qn, key)
    local was, old = named[field], named_job[field]
    if was and mode == 'd' and old and old.state == DELAYED and not old.delivered then
      local job = job_of(j, key)
      replace(was, old, job)
      named_job[field] = job
      hit(answer, place, was, 'r')
    elseif was then
      hit(answer, place, was, 'd')
    elseif mode == 'd' then
      local job = job_of(j, key)
      put_now(id, job, field)
      named[field], named_job[field] = id, job
      answer[1] = answer[1] + 1
    else
      store(id, kpack(key, keyend, ARGV[j + 1], ARGV[j + 2]), r)
      key_sets[#key_sets + 1] = field
      key_sets[#key_sets + 1] = id
      named[field] = id
      answer[1] = answer[1] + 1
    end
  end
  return answer
end

for _, p in ipairs(pubs) do
  local at, first, last, n, stride = p[1], p[2], p[3], p[4], p[5]
  local clash = false
  for j = first, last, stride do
    if taken[ARGV[j]] then clash = true; break end
  end
  if clash then
    out[#out + 1] = 0
  else
    local schedule = ARGV[at] .. ' ' .. ARGV[at + 1] .. ' ' .. ARGV[at + 2] .. ' ' .. ARGV[at + 3]
      .. ' ' .. ARGV[at + 4]
    local kind = kinds[schedule]
    if not kind then
      local r = fresh(queue, qn, tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), now)
      r.priority = tonumber(ARGV[at + 3])
      with_policy(r, ARGV[at + 4])
      kind = { r = r, pack = packer(r) }
      kinds[schedule] = kind
    end
    local r, pack = kind.r, kind.pack
    if stride == 4 and not kind.kpack then kind.kpack = key_packer(kind.r) end
    if r.state == DELAYED and not woke then
      wake, woke = next_wake(k.t, k.s), true
    end
    local answer = n
    if stride == 4 then
      answer = keyed(r, kind.kpack, ARGV[at + 5], first, last)
      n = answer[1]
    else
      for j = first, last, 3 do
        store(ARGV[j], pack(ARGV[j + 1], ARGV[j + 2]), r)
      end
    end
    -- A later publication of this call with one of these ids clashes, as
    -- it would with a job stored before the call.
    for j = first, last, stride do taken[ARGV[j]] = true end
    stored[r.state] = (stored[r.state] or 0) + n
    total = total + n
    out[#out + 1] = answer
  end
end

hset_many(KEYS[1], records)
hset_many(k.prefix .. 'k', key_sets)
for _, p in ipairs(ready_levels) do
  call_many('LPUSH', ready_list(KEYS[4], p), ready_ids[p], 1)
  if p > 0 then mark_level(KEYS[4], p) end
end
if expiring then
  -- Ready jobs' expiries wake a sleeping pump as due times do, when one
  -- needs it sooner than the slot's next wake-up (a pump sleeps until
  -- then, or its idle check).
  local before = wake
  if not woke then before = next_wake(k.t, k.s) end
  local at = ex.write()
  if before == nil or at < before then announce(ARGV[3], ARGV[4]) end
end
local counts = tally()
for state, n in pairs(stored) do counts.state(state, queue, n) end
counts.add('P' .. queue, total)
if total > 0 then counts.use(queue, total, bytes) end
counts.flush(KEYS[3])
local ready = ready_count + written_ready
if ready > 0 then announce(ARGV[2], ready) end
return out
