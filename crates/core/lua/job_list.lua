-- Lists part of one queue's jobs in one state in one slot, without
-- changing anything, reading at most a bounded number of entries.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: wheel index zset
-- KEYS[4]: queue table   KEYS[5]: the queue's ready list   KEYS[6]: its dead list
-- KEYS[7]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: state: 'ready', 'delayed', 'reserved' or 'dead'   ARGV[2]: qualified queue
-- ARGV[3], ARGV[4]: where to go on (0, 0 at first; as the last call returned)
-- ARGV[5]: jobs to return at most   ARGV[6]: entries to read at most
-- ARGV[7]: body bytes to return per job   ARGV[8]: slot key prefix (wheel list = prefix .. 'w:' .. second)
-- Where to go on: ready and dead, (256 - the priority reached, entries of
-- its list passed from its consume end, the oldest), the queue's ready
-- lists taken in consume order (`ready_lists`: highest priority first; the
-- dead list counts as priority 0); reserved, (0, rank in the timer zset);
-- delayed, (0, rank in the timer zset) for those due soon, then (k, index
-- in the list) for the wheel second of rank k - 1, in due order.
-- Returns: {done (1 when nothing is left), next ARGV[3], next ARGV[4], now,
--   then per job: id, its record cut after ARGV[7] body bytes, its body's
--   size, its time (reserved: the TTR deadline; others: 0)}.
local state, queue = ARGV[1], ARGV[2]
local a, b = tonumber(ARGV[3]), tonumber(ARGV[4])
local want, budget, preview = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
local out = { 0, a, b, now }
local found = 0

-- Keeps job `id` when it is live and in `st` of this queue (`qn`: its
-- number here; nil for lists, which hold one queue).
local function keep(id, st, qn, at)
  local raw = redis.call('HGET', KEYS[1], id)
  if not raw then return end
  local s, q, _, expire = head(raw)
  if s ~= st or (qn and q ~= qn) or (expire > 0 and expire <= now) then return end
  local pos = body_at(raw)
  local size = #raw - pos + 1
  out[#out + 1] = id
  out[#out + 1] = string.sub(raw, 1, pos - 1 + preview)
  out[#out + 1] = size
  out[#out + 1] = at or 0
  found = found + 1
end

local function finish(done, na, nb)
  out[1], out[2], out[3] = done, na, nb
  return out
end

if state == 'ready' or state == 'dead' then
  local lists, levels, st = { KEYS[6] }, { 0 }, DEAD
  if state == 'ready' then
    lists, levels = ready_lists(KEYS[5])
    st = READY
  end
  -- The priority the listing has reached (`a` is 256 - it; 0 at first):
  -- a level that went, or came, between calls moves the listing on to the
  -- next one below, not off its place.
  local from = 255
  if a > 0 then from = 256 - a end
  for i, lkey in ipairs(lists) do
    local p = levels[i]
    if p <= from then
      if p < from then b = 0 end
      from = p
      local len = redis.call('LLEN', lkey)
      if b < len then
        local n = math.min(want - found, budget)
        -- Ids are pushed at the head: the oldest (next to consume) is at -1.
        local ids = redis.call('LRANGE', lkey, -(b + n), -(b + 1))
        for x = #ids, 1, -1 do keep(ids[x], st, nil) end
        budget = budget - #ids
        b = b + #ids
        if b < len or found >= want or budget <= 0 then return finish(0, 256 - p, b) end
      end
    end
  end
  return finish(1, 0, 0)
end

local qn = qn_of(KEYS[4], queue)
if not qn then return finish(1, 0, 0) end
local st = state == 'reserved' and RESERVED or DELAYED
if a == 0 then
  -- The timer zset, by rank: reservations and delayed jobs due soon (among
  -- other queues' entries and expiries).
  local entries = redis.call('ZRANGE', KEYS[2], b, b + budget - 1, 'WITHSCORES')
  local read = 0
  for i = 1, #entries, 2 do
    read = read + 1
    keep(entries[i], st, qn, st == RESERVED and tonumber(entries[i + 1]) or nil)
    if found >= want then return finish(0, 0, b + read) end
  end
  if #entries / 2 == budget then return finish(0, 0, b + read) end
  if st == RESERVED then return finish(1, 0, b + read) end
  a, b = 1, 0
  budget = budget - read
end
-- Delayed jobs due later: the wheel seconds in order, each list from its
-- start. Each call reads at least one entry or passes a second, so a
-- listing always goes on; a second whose list is empty (it holds only
-- expiries of ready or dead jobs) costs one entry of the budget.
while budget > 0 do
  local second = redis.call('ZRANGE', KEYS[3], a - 1, a - 1)[1]
  if not second then return finish(1, a, b) end
  local lkey = ARGV[8] .. 'w:' .. second
  local ids = redis.call('LRANGE', lkey, b, b + budget - 1)
  budget = budget - math.max(#ids, 1)
  for i = 1, #ids do
    keep(ids[i], st, qn)
    if found >= want then return finish(0, a, b + i) end
  end
  if b + #ids < redis.call('LLEN', lkey) then return finish(0, a, b + #ids) end
  a, b = a + 1, 0
end
return finish(0, a, b)
