-- Shared helpers, prepended to every script at build time (see src/scripts.rs).
-- Every script works on the keys of one slot (hash tag `{<slot>}`).
--
-- Job record (one field of the slot's jobs hash, value packed with `struct`):
--   state   B   1 delayed, 2 ready, 3 reserved, 4 dead; plus 16 once the
--               job has been delivered (so the first delivery is known);
--               plus 32 on a job that died, whose `due` then holds when
--               it died (`patch_dead`; jobs dead before this lack it)
--   tries   H   deliveries left
--   pub     I6  publish time, ms, shard clock
--   expire  I6  expiry time, ms, shard clock; 0 = never
--   due     I6  when a delayed job is due, ms; on a ready job, when it
--               became ready after a delay, a retry or a respawn (0 for
--               one published ready: `ready_since`); on a job that died
--               (flag 32), when it died
--   queue   I3  the queue's number in the slot's queue table (`sd:T:q`:
--               `<ns>/<queue>` → number, `#<number>` → `<ns>/<queue>`);
--               a number costs 3 bytes where the name cost its length
--               (a record's size decides its Redis allocation class)
--   attrs   Hc0 attributes as JSON text, "" when none
--   body    the rest of the value
-- State and tries lead the record, so a state change rewrites those three
-- bytes in front of the stored value (`patch`) without unpacking the rest.
local DELAYED, READY, RESERVED, DEAD = 1, 2, 3, 4
-- Counter field prefix per state, in the slot's counters hash.
local COUNTER = { 'l', 'r', 'f', 'd' }
local HEADER = '>BHI6I6I6I3Hc0'
-- The timer wheel: a delayed job due at least NEAR_MS from now waits in the
-- list of its SECOND_MS-wide wheel second (compact), not in the timer zset;
-- the pump moves a second's jobs into the zset SECOND_MS before the second
-- starts.
local SECOND_MS, NEAR_MS = 1000, 2000

-- Announces `message` on `channel`: a sharded channel (`SPUBLISH`, heard
-- only on the node that serves the slot) when the channel carries a hash tag,
-- as it does on a Redis Cluster shard (its slot's `{<slot>}`), else a
-- classic channel (`PUBLISH`), as on a standalone or Sentinel shard, whose
-- Redis may predate sharded pub/sub (7.0). See `src/keys.rs`.
local function announce(channel, message)
  if string.find(channel, '{', 1, true) then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The record `raw` with a new state and tries, the rest unchanged.
-- (`r.queue`, the qualified name, is not stored: scripts set it from the
-- queue they were given, or from the queue table, after `decode`.)
local function patch(raw, state, tries, delivered)
  if delivered then state = state + 16 end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4)
end

local function encode(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  if r.died then state = state + 32 end
  return struct.pack(HEADER, state, r.tries, r.pub, r.expire, r.due or 0, r.qn, #r.attrs, r.attrs)
    .. r.body
end

local function decode(s)
  local state, tries, pub, expire, due, qn, attrs, pos = struct.unpack(HEADER, s)
  return { state = state % 16, delivered = state % 32 >= 16, died = state >= 32, tries = tries, pub = pub,
           expire = expire, due = due, qn = qn, attrs = attrs, body = string.sub(s, pos) }
end

-- The record `raw` of a reservation whose TTR ran out, made ready at
-- `now` with `tries` left: `now` goes in its due field (`ready_since`).
local function patch_retry(raw, tries, delivered, now)
  local state = READY
  if delivered then state = state + 16 end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- When ready job `r` became ready: its publication, or later its due
-- time, retry or respawn (each writes the due field).
local function ready_since(r)
  return math.max(r.pub, r.due)
end

-- The leading fields of a record, without unpacking its attributes and
-- body (no string is made): state (without the delivered flag), queue
-- number, tries, expiry, whether it has been delivered, and due time.
local function head(raw)
  local state, tries, _, expire, due, qn = struct.unpack('>BHI6I6I6I3', raw)
  return state % 16, qn, tries, expire, state % 32 >= 16, due
end

-- The record `raw` of a job that dies at `now` with `tries` left: state
-- DEAD, delivered, and the died flag (32), with `now` in its due field
-- (a dead job has no due time; the dead-letter listing shows when it
-- died). Records of jobs that died before this flag existed lack it.
local function patch_dead(raw, tries, now)
  return struct.pack('>BH', DEAD + 16 + 32, tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- A function that packs records of jobs that share everything but their
-- attributes and body (the jobs of one publication): the fixed fields are
-- packed once, and each record costs one concatenation.
local function packer(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  local fixed = struct.pack('>BHI6I6I6I3', state, r.tries, r.pub, r.expire, r.due or 0, r.qn)
  local bare = fixed .. struct.pack('>H', 0)
  return function(attrs, body)
    if attrs == '' then return bare .. body end
    return fixed .. struct.pack('>H', #attrs) .. attrs .. body
  end
end

-- The slot's queue table (`qkey`): the number of a qualified queue, or nil
-- when the slot never held a job of it.
local function qn_of(qkey, name)
  local n = redis.call('HGET', qkey, name)
  if n then return tonumber(n) end
  return nil
end

-- The number of a qualified queue, given one if it has none yet.
local function qn_make(qkey, name)
  local n = qn_of(qkey, name)
  if n then return n end
  n = redis.call('HINCRBY', qkey, '#', 1)
  redis.call('HSET', qkey, name, n, '#' .. n, name)
  return n
end

-- A function from queue number to qualified name, reading the table once
-- per number.
local function qnames(qkey)
  local cache = {}
  return function(n)
    local name = cache[n]
    if not name then
      name = redis.call('HGET', qkey, '#' .. n) or ''
      cache[n] = name
    end
    return name
  end
end

local function expired(r, now)
  return r.expire > 0 and r.expire <= now
end

-- Adds to a counter field; a field that reaches 0 goes, so a slot's
-- counters hold only queues with jobs (and their running totals).
local function bump(ckey, field, delta)
  if redis.call('HINCRBY', ckey, field, delta) == 0 then
    redis.call('HDEL', ckey, field)
  end
end

local function count(ckey, state, queue, delta)
  bump(ckey, COUNTER[state] .. queue, delta)
end

-- Per-namespace usage of the slot on this shard, in its usage hash
-- (`sd:T:u`, named after another one-letter key of the slot, such as the
-- counters hash `sd:T:c`): `j<ns>` the jobs
-- held (records, and entries in transit to another shard until their
-- copy is safe), `b<ns>` their bytes (id and record, attributes and body
-- included: `job_bytes`). Changed where a job arrives or leaves, never on
-- a change of state; a field that reaches 0 goes, so an idle namespace
-- has no field. Quotas and `sundial usage` read it (`engine::slots`).
local RECORD_HEAD = 26
local function usage_key(slot_key)
  return string.sub(slot_key, 1, -2) .. 'u'
end
local function ns_of(queue)
  return string.match(queue, '^[^/]*')
end
-- A job's bytes: its id and its record (`raw`, or a decoded record), whose
-- length never changes over the job's life (state changes patch fixed-width
-- fields).
local function job_bytes(id, raw)
  if type(raw) == 'string' then return #id + #raw end
  return #id + RECORD_HEAD + #raw.attrs + #raw.body
end
local function use(ckey, queue, jobs, bytes)
  local ukey, ns = usage_key(ckey), ns_of(queue)
  bump(ukey, 'j' .. ns, jobs)
  bump(ukey, 'b' .. ns, bytes)
end

-- Running totals per queue in the same counters hash, for rates and usage:
-- 'P' jobs published, 'C' deliveries, 'A' jobs acked (deleted by id). They
-- only grow.
local function total(ckey, kind, queue, n)
  redis.call('HINCRBY', ckey, kind .. queue, n)
end

-- Counter changes gathered over a script and written once per field
-- (`flush`): a script that moves many jobs writes each counter once, not
-- once per job. Flush before anything reads the counters (`unlist`).
local function tally()
  local t = { d = {}, u = {} }
  function t.add(field, n)
    t.d[field] = (t.d[field] or 0) + n
  end
  function t.state(state, queue, n)
    t.add(COUNTER[state] .. queue, n)
  end
  -- Usage (see `use`): jobs and bytes that arrive (> 0) or leave (< 0).
  function t.use(queue, jobs, bytes)
    local ns = ns_of(queue)
    local u = t.u[ns]
    if not u then u = { 0, 0 }; t.u[ns] = u end
    u[1], u[2] = u[1] + jobs, u[2] + bytes
  end
  function t.flush(ckey)
    for f, n in pairs(t.d) do
      if n ~= 0 then bump(ckey, f, n) end
    end
    t.d = {}
    local ukey = usage_key(ckey)
    for ns, u in pairs(t.u) do
      if u[1] ~= 0 then bump(ukey, 'j' .. ns, u[1]) end
      if u[2] ~= 0 then bump(ukey, 'b' .. ns, u[2]) end
    end
    t.u = {}
  end
  return t
end

-- Runs `cmd key <args>` for a long argument list in pieces of at most
-- 1,000 entries of `width` values each (Lua's `unpack` takes a few
-- thousand values at most), so that many writes to one key cost one
-- command, not one per job. Nothing is run for an empty list.
local function call_many(cmd, key, args, width)
  local step = 1000 * width
  for i = 1, #args, step do
    redis.call(cmd, key, unpack(args, i, math.min(i + step - 1, #args)))
  end
end

-- The values of the fields `ids` of hash `key`, in order (false where a
-- field is absent), read with one HMGET per 1,000 fields.
local function hmget_many(key, ids)
  local values = {}
  for c = 1, #ids, 1000 do
    local found = redis.call('HMGET', key, unpack(ids, c, math.min(c + 999, #ids)))
    for x = 1, #found do values[c + x - 1] = found[x] end
  end
  return values
end

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

-- After jobs were made ready with a TTL of `ttl` ms from `now`: tells the
-- pumps when their expiry is sooner than the slot's earliest timer entry
-- before them (`before`), so that a pump asleep until its idle check
-- drops them on time.
local function announce_expiry(before, now, ttl, timer_channel, slot)
  if ttl > 0 and (before == nil or now + ttl < before) then
    announce(timer_channel, slot)
  end
end

-- The timer entry a job needs in a state that has no due time of its own:
-- its expiry, or none.
local function arm_expiry(tkey, id, r)
  if r.expire > 0 then
    redis.call('ZADD', tkey, r.expire, id)
  else
    redis.call('ZREM', tkey, id)
  end
end

-- Removes a job record and its timer entry, and its usage (`r.raw`: its
-- record when `r` is not decoded; with a tally `t`, the usage is
-- gathered there). Its entry in a ready or dead list, if it has one, is
-- for the caller: scripts that popped it have nothing left to remove, and
-- the others call `unlist`.
local function drop(jkey, tkey, ckey, id, r, t)
  redis.call('HDEL', jkey, id)
  redis.call('ZREM', tkey, id)
  count(ckey, r.state, r.queue, -1)
  local bytes = job_bytes(id, r.raw or r)
  if t then t.use(r.queue, -1, -bytes) else use(ckey, r.queue, -1, -bytes) end
end

-- After `drop` of a READY or DEAD job, removes its id from that state's list
-- (`lkey`: the queue's ready or dead list), so that no list keeps ids of
-- jobs that are gone:
-- - when the slot holds no other job of the queue in that state, every id
--   left in the list is stale: the list goes;
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
local function unlist(lkey, jkey, ckey, state, queue, id)
  local left = tonumber(redis.call('HGET', ckey, COUNTER[state] .. queue) or '0')
  if left <= 0 then
    redis.call('DEL', lkey)
    return
  end
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
end

-- Removes job `id` (record `r`, of `queue`) in whatever state it is: its
-- record, its timer entry, its count, and its entry in the queue's ready
-- list (`rkey`) or dead list (`dkey`). For delete and republish.
local function remove(jkey, tkey, ckey, rkey, dkey, queue, id, r)
  r.queue = queue
  drop(jkey, tkey, ckey, id, r)
  if r.state == READY then
    unlist(rkey, jkey, ckey, READY, queue, id)
  elseif r.state == DEAD then
    unlist(dkey, jkey, ckey, DEAD, queue, id)
  end
end

-- Makes dead job `id` (record `r`, of `r.queue`) ready again, at the
-- head of its queue's ready list (`rkey`), with one try and a TTL of
-- `ttl` ms (0 = never expires). Its entry in the dead list is for the
-- caller (popped already, or `unlist`ed after).
local function respawn(jkey, tkey, ckey, rkey, id, r, ttl, now)
  count(ckey, DEAD, r.queue, -1)
  r.state, r.tries, r.expire, r.died, r.due = READY, 1, 0, false, now
  if ttl > 0 then r.expire = now + ttl end
  redis.call('HSET', jkey, id, encode(r))
  count(ckey, READY, r.queue, 1)
  redis.call('LPUSH', rkey, id)
  arm_expiry(tkey, id, r)
end

local function ttl_left(r, now)
  if r.expire == 0 then return 0 end
  return r.expire - now
end

-- The reply shape shared by consume and peek:
-- {queue, id, elapsed_ms, ttl_ms (0 = no expiry), tries, attrs, body, state}
local function view(r, id, now)
  return { r.queue, id, math.max(0, now - r.pub), ttl_left(r, now), r.tries, r.attrs, r.body, r.state }
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
-- queue, with its expiry on the timer (the pumps told when it is the
-- slot's earliest entry, so that a pump asleep until its idle check drops
-- it on time).
local function put(k, rkey, id, r, now, wake, timer_channel, slot_tag)
  redis.call('HSET', k.j, id, encode(r))
  if r.state == DELAYED then
    return delay(k, id, r.due, now, wake, timer_channel, slot_tag)
  end
  redis.call('LPUSH', rkey, id)
  if r.expire > 0 then
    -- Its expiry, which wakes a sleeping pump as a due time does.
    local before = zmin(k.t)
    redis.call('ZADD', k.t, r.expire, id)
    if before == nil or r.expire < before then announce(timer_channel, slot_tag) end
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

-- Jobs on their way to another shard (the mover: `src/engine/mover.rs`)
-- wait in the slot's transit hash (`sd:T:m`), out of every list, timer and
-- count, until their copy there is safe. An entry is packed as: the job's
-- timer deadline while reserved (`I6`, ms, this shard's clock; 0 in other
-- states), the take's tag (`I7`, the time of the take in µs: it tells this
-- take's copy from an earlier one's, see `move_in.lua`), its qualified
-- queue (`Hc0`), the destination (`Hc0`: a shard's name, or `@<pool>`),
-- then the job's record as it was. A job deleted (acked) while in transit
-- leaves `x`, its queue (`Hc0`) and the destination in its place, so that
-- the mover deletes the copy it may have made there.
local function transit_pack(deadline, tag, queue, dest, raw)
  return struct.pack('>I6I7H', deadline, tag, #queue) .. queue .. struct.pack('>H', #dest) .. dest .. raw
end

-- The mark that a job deleted in transit leaves (see above).
local function transit_acked(e)
  return 'x' .. struct.pack('>H', #e.queue) .. e.queue .. e.dest
end

-- The time of a take, in µs: `transit_pack`'s tag.
local function transit_tag()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An entry of the transit hash, unpacked ({deadline, tag, queue, dest,
-- raw}), or nil for the mark of a job deleted in transit.
local function transit_unpack(v)
  if string.sub(v, 1, 1) == 'x' then return nil end
  local deadline, tag, qlen, pos = struct.unpack('>I6I7H', v)
  local queue = string.sub(v, pos, pos + qlen - 1)
  local dlen, at = struct.unpack('>H', v, pos + qlen)
  return { deadline = deadline, tag = tag, queue = queue, dest = string.sub(v, at, at + dlen - 1),
           raw = string.sub(v, at + dlen) }
end
