-- Reads a page of one namespace's jobs in a slot, for an export, without
-- changing anything. Two modes:
-- `scan`: HSCAN of the jobs hash from `cursor`; returns the namespace's
--   delayed and reserved jobs (ready and dead jobs are read from their lists,
--   in order, by `list`).
-- `list`: a page of a queue's ready or dead list from its head (newest
--   first: an import appends them at the consuming end in this order, so
--   the list keeps its order), skipping stale ids. A queue's ready lists
--   are read in turn, highest priority first (`ready_lists`); the import
--   lists each job by its record's priority.
-- `transit`: HSCAN of the transit hash from `cursor`: the namespace's jobs
--   a mover has taken out of the slot and not let go yet (whatever their
--   state), as they were taken.
-- KEYS[4]: the transit hash   KEYS[5]: the slot's guard (never read: see `SlotKeys::guard`)
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: queue table
-- ARGV[1]: mode   ARGV[2]: cursor (scan) or where the list was left (list; 0 at first)   ARGV[3]: page size
-- ARGV[4]: `<ns>/` (scan) or the list's key (list)
-- ARGV[5]: (list) the state its jobs are in   ARGV[6]: (list) the qualified queue
-- Returns {now, next (cursor, or entries passed; `0`/`-1` at the end), then per
-- job: id, qualified queue, TTR deadline (reserved, else 0), record}.
local mode, count = ARGV[1], tonumber(ARGV[3])
local out = { now_ms(), '0' }
if mode == 'transit' then
  local prefix = ARGV[4]
  local r = redis.call('HSCAN', KEYS[4], ARGV[2], 'COUNT', count)
  out[2] = r[1]
  local kv = r[2]
  for x = 1, #kv, 2 do
    local e = transit_unpack(kv[x + 1])
    if e and string.sub(e.queue, 1, #prefix) == prefix then
      out[#out + 1] = kv[x]
      out[#out + 1] = e.queue
      out[#out + 1] = e.deadline
      out[#out + 1] = e.raw
    end
  end
  return out
end
if mode == 'scan' then
  local prefix = ARGV[4]
  local qname = qnames(KEYS[3])
  local r = redis.call('HSCAN', KEYS[1], ARGV[2], 'COUNT', count)
  out[2] = r[1]
  local kv = r[2]
  for x = 1, #kv, 2 do
    local st, qn = head(kv[x + 1])
    if st == DELAYED or st == RESERVED then
      local q = qname(qn)
      if string.sub(q, 1, #prefix) == prefix then
        local deadline = 0
        if st == RESERVED then deadline = tonumber(redis.call('ZSCORE', KEYS[2], kv[x]) or '0') end
        out[#out + 1] = kv[x]
        out[#out + 1] = q
        out[#out + 1] = deadline
        out[#out + 1] = kv[x + 1]
      end
    end
  end
  return out
end
local passed, state, queue = tonumber(ARGV[2]), tonumber(ARGV[5]), ARGV[6]
-- A ready list's cursor names the priority it reached: (255 - p) * SPAN +
-- entries of that level passed, so that a level emptied (or filled)
-- between pages moves the export on to the next one, not off its place.
local SPAN = 2 ^ 40
local lists, levels = { ARGV[4] }, { 255 }
local from, skip = 255, passed
if state == READY then
  lists, levels = ready_lists(ARGV[4])
  from, skip = 255 - math.floor(passed / SPAN), passed % SPAN
end
local ids = {}
out[2] = '-1'
for i, lkey in ipairs(lists) do
  local p = levels[i]
  if p <= from then
    if p < from then skip = 0 end
    from = p
    local got = redis.call('LRANGE', lkey, skip, skip + count - #ids - 1)
    for _, id in ipairs(got) do ids[#ids + 1] = id end
    skip = skip + #got
    if #ids >= count then
      out[2] = string.format('%d', (255 - p) * SPAN + skip)
      break
    end
  end
end
local qn = qn_of(KEYS[3], queue)
if #ids == 0 or not qn then return out end
local raws = hmget_many(KEYS[1], ids)
for x = 1, #ids do
  local raw = raws[x]
  if raw then
    local st, q = head(raw)
    if st == state and q == qn then
      out[#out + 1] = ids[x]
      out[#out + 1] = queue
      out[#out + 1] = 0
      out[#out + 1] = raw
    end
  end
end
return out
