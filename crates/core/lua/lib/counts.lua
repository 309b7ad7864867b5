-- The shared helpers, part 2 of 7: counters, usage and running totals
-- of a slot, gathered over a script (`tally`), and commands over long
-- argument lists. See `record.lua` for how the seven parts are used.

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
-- A job's bytes: its id and its record (`raw`, or a decoded record). State
-- changes patch fixed-width fields; a record grows only where a script
-- extends it (`deliver`) or writes a reason, and that script counts it.
local function job_bytes(id, raw)
  if type(raw) == 'string' then return #id + #raw end
  local n = #id + RECORD_HEAD + #raw.attrs + #raw.body
  if raw.ext then n = n + EXT_BYTES + #(raw.policy or '') + #(raw.reason or '') end
  if raw.key and raw.key ~= '' then n = n + 8 + #raw.key end
  if (raw.priority or 0) > 0 then n = n + 1 end
  return n
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
  -- Counter field names by queue and state, made once per call rather
  -- than once per job.
  local fields = {}
  function t.state(state, queue, n)
    local q = fields[queue]
    if not q then
      q = {}
      fields[queue] = q
    end
    local f = q[state]
    if not f then
      f = COUNTER[state] .. queue
      q[state] = f
    end
    t.d[f] = (t.d[f] or 0) + n
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

-- Redis keeps a small hash compact (a listpack) up to
-- `hash-max-listpack-entries` fields (512 unless configured), and before
-- 7.2 it fills one from a long HSET a field at a time, each after a
-- linear search of those before it: 1,000 new fields in one HSET took
-- 1.3 to 2.0 ms where a hash table takes 0.13 to 0.21 ms (Redis 7.0.15),
-- and the expiries of 1,000 jobs made ready together all start one such
-- hash. So a batch that takes a compact hash (or none) past TABLE_AT
-- fields, which Redis would turn into a table by its end anyway, first
-- makes it one, as Redis 7.2 does: a field whose value is longer than a
-- compact hash holds (`hash-max-listpack-value`, 64 bytes by default),
-- set and removed again. A smaller batch leaves the hash as Redis keeps
-- it. (The long value is made only here: the helpers run with every
-- script call, and 8 KiB made each time would cost every call.)
-- A batch of BATCH_AT fields or fewer costs little either way, and skips
-- the two reads.
local TABLE_AT, BATCH_AT, TABLE_FIELD = 512, 64, '\0table'
local function hset_many(key, args)
  if #args > 2 * BATCH_AT and redis.call('HLEN', key) + #args / 2 > TABLE_AT
      and redis.call('OBJECT', 'ENCODING', key) ~= 'hashtable' then
    redis.call('HSET', key, TABLE_FIELD, string.rep('-', 8192))
    call_many('HSET', key, args, 2)
    redis.call('HDEL', key, TABLE_FIELD)
    return
  end
  call_many('HSET', key, args, 2)
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
