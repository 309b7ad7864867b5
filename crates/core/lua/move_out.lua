-- Takes jobs out of a slot whose writes have moved to another shard, for
-- the mover (`src/engine/mover/`), which copies them there
-- (`move_in.lua`) and then lets them go here (`move_done.lua`). A taken job
-- leaves its lists, its timer entry or expiry in the wheel and its count,
-- and waits in the
-- transit hash (see `transit_pack` in `lua/lib/transit.lua`), where peek and ack by id
-- still find it, until its copy is safe.
-- Ready and dead jobs are taken newest first from each queue's list (the
-- copy appends them at the consuming end, so the list keeps its order);
-- then every other job, with HSCAN over the jobs hash from `cursor`.
-- A slot with no job left, here or in transit, is cleared: its wheel (lists
-- and expiry hashes), its lists (stale ids only), its queue table and
-- counters, and the mover's lease (the pump's lease stays with the pump).
-- With a queue prefix (`<ns>/`: a namespace moving to another pool), only
-- that namespace's jobs are taken, and the slot is never cleared.
-- The mover's lease (KEYS[7]) fences every call: one mover per slot.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: queue table
-- KEYS[5]: wheel index zset   KEYS[6]: transit hash   KEYS[7]: mover lease
-- KEYS[8]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: owner   ARGV[2]: lease ttl ms   ARGV[3]: mode: `take`, `pending` (the transit
--          entries, from `cursor`), `read` (the transit entries of the ids ARGV[10..],
--          as they are now) or `release` (the lease, if held)
-- ARGV[4]: at most this many jobs   ARGV[5]: destination shard's name
-- ARGV[6]: slot key prefix   ARGV[7]: cursor (`0` to start)
-- ARGV[8]: queue prefix (`` for every queue)
-- ARGV[9]: (take) no more jobs once their records hold this many bytes (at
--          least one job is taken): a batch of large bodies stays small
-- ARGV[10..]: (read) the ids
-- Returns {-1, holder} and no change when another owner holds the lease;
-- else {now, next cursor, cleared (1: the slot held nothing and is clear),
-- transit entries left, then per job: id, transit entry} (cleared: then
-- per running total of its queues, `P<queue>`, `C<queue>` or `A<queue>`, and its value).
local owner, mode = ARGV[1], ARGV[3]
local holder = redis.call('GET', KEYS[7])
if holder and holder ~= owner then return { -1, holder } end
if mode == 'release' then
  if holder then redis.call('DEL', KEYS[7]) end
  return { 0, '0', 0, 0 }
end
redis.call('SET', KEYS[7], owner, 'PX', ARGV[2])
local now = now_ms()
local limit, dest, prefix, cursor = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local only = ARGV[8] or ''
local jkey, tkey, ckey, mkey = KEYS[1], KEYS[2], KEYS[3], KEYS[6]
local out = { now, '0', 0, 0 }
local function ours(queue)
  return only == '' or string.sub(queue, 1, #only) == only
end

if mode == 'read' then
  local ids = {}
  for i = 10, #ARGV do ids[#ids + 1] = ARGV[i] end
  local vals = hmget_many(mkey, ids)
  for x = 1, #ids do
    if vals[x] then
      out[#out + 1] = ids[x]
      out[#out + 1] = vals[x]
    end
  end
  out[4] = redis.call('HLEN', mkey)
  return out
end

if mode == 'pending' then
  local r = redis.call('HSCAN', mkey, cursor, 'COUNT', math.max(limit, 1))
  out[2] = r[1]
  for _, v in ipairs(r[2]) do out[#out + 1] = v end
  out[4] = redis.call('HLEN', mkey)
  return out
end

local t = tally()
local tag = transit_tag()
local seen, taken, entries = {}, {}, {}
-- The taken ready and dead jobs, per wheel second of their expiry.
local unplaced = {}
local budget, bytes = tonumber(ARGV[9]), 0
local function full()
  return #taken >= limit or bytes >= budget
end
local function take(id, raw, queue, deadline)
  if seen[id] then return end
  seen[id] = true
  taken[#taken + 1] = id
  bytes = bytes + #raw
  local e = transit_pack(deadline, tag, queue, dest, raw)
  entries[#entries + 1] = id
  entries[#entries + 1] = e
  out[#out + 1] = id
  out[#out + 1] = e
  local st, _, _, expire = head(raw)
  t.state(st, queue, -1)
  if st == READY or st == DEAD then unplace_expiry(tkey, id, expire, unplaced) end
  -- Its key is the new shard's to keep (`move_in.lua`).
  unkey(jkey, id, raw, nil)
end

-- Ready and dead lists, newest first, of the queues whose counts say they
-- hold ready or dead jobs.
for _, field in ipairs(redis.call('HKEYS', ckey)) do
  if full() then break end
  local kind = string.sub(field, 1, 1)
  if (kind == 'r' or kind == 'd') and ours(string.sub(field, 2)) then
    local queue = string.sub(field, 2)
    local state = READY
    if kind == 'd' then state = DEAD end
    -- A queue's ready jobs wait in one list per priority level.
    local lkeys, levels = { prefix .. 'd:' .. queue }, { 0 }
    if kind == 'r' then lkeys, levels = ready_lists(prefix .. 'r:' .. queue) end
    for l, lkey in ipairs(lkeys) do
      -- Bounded: a run of stale ids (jobs deleted while listed) is trimmed
      -- over several calls.
      local pages = 0
      while not full() and pages < 10 do
        pages = pages + 1
        local ids = redis.call('LRANGE', lkey, 0, math.min(limit - #taken, 1000) - 1)
        if #ids == 0 then break end
        local raws = hmget_many(jkey, ids)
        -- Up to the byte budget: the ids past it stay listed.
        local passed = 0
        for x = 1, #ids do
          if full() then break end
          passed = x
          local raw = raws[x]
          if raw and head(raw) == state then take(ids[x], raw, queue, 0) end
        end
        redis.call('LTRIM', lkey, passed, -1)
      end
      -- A priority's list taken whole leaves the queue's levels.
      if levels[l] > 0 and redis.call('EXISTS', lkey) == 0 then
        unmark_level(prefix .. 'r:' .. queue, levels[l])
      end
    end
  end
end

-- Every other job (delayed, reserved, and any that became ready or dead
-- since the lists were read).
if not full() then
  local qname = qnames(KEYS[4])
  -- Records read, taken or not (a namespace's move reads other tenants'
  -- too): bounded in count and in bytes, checked between pages of at
  -- most 64 records.
  local scanned, scanned_bytes = 0, 0
  repeat
    local r = redis.call('HSCAN', jkey, cursor, 'COUNT', math.min(math.max(limit - #taken, 10), 64))
    cursor = r[1]
    local kv = r[2]
    for x = 1, #kv, 2 do
      local id, raw = kv[x], kv[x + 1]
      scanned_bytes = scanned_bytes + #raw
      local st, qn = head(raw)
      local queue = qname(qn)
      -- Past the byte budget, a job of this page is taken by a later
      -- call: the walk goes on from this cursor, and reaches it again at
      -- the latest when a walk ends and the mover takes again.
      if not seen[id] and ours(queue) and not full() then
        local deadline = 0
        if st == RESERVED then deadline = tonumber(redis.call('ZSCORE', tkey, id) or '0') end
        take(id, raw, queue, deadline)
      end
    end
    scanned = scanned + #kv / 2
  -- Bounded: a namespace's few jobs among many others' are found over
  -- several calls, each a short script.
  until cursor == '0' or full() or scanned >= 20 * limit or scanned_bytes >= budget
  out[2] = cursor
end

if #taken > 0 then
  call_many('HDEL', jkey, taken, 1)
  call_many('ZREM', tkey, taken, 1)
  unplace_all(tkey, unplaced)
  hset_many(mkey, entries)
  t.flush(ckey)
elseif only == '' and redis.call('HLEN', jkey) == 0 and redis.call('HLEN', mkey) == 0 then
  for _, second in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    redis.call('DEL', prefix .. 'w:' .. second, prefix .. 'e:' .. second)
  end
  for _, field in ipairs(redis.call('HKEYS', KEYS[4])) do
    if string.sub(field, 1, 1) ~= '#' then
      drop_ready(prefix .. 'r:' .. field)
      redis.call('DEL', prefix .. 'd:' .. field)
    end
  end
  -- The queues' running totals go with the reply, for the mover to add
  -- where the slot is now.
  local fields = redis.call('HGETALL', ckey)
  for x = 1, #fields, 2 do
    local kind = string.sub(fields[x], 1, 1)
    if kind == 'P' or kind == 'C' or kind == 'A' then
      out[#out + 1] = fields[x]
      out[#out + 1] = tonumber(fields[x + 1])
    end
  end
  redis.call('DEL', KEYS[5], tkey, ckey, KEYS[4], KEYS[7], usage_key(ckey))
  out[3] = 1
end
out[4] = redis.call('HLEN', mkey)
return out
