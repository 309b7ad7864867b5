-- Counts a slot's usage afresh (`use` in `lua/lib/counts.lua`): every record and
-- every transit entry of the slot on this shard, per namespace. For a
-- shard whose data predates the usage hash (see `Shard::check`); one
-- atomic pass over the slot, so that it may run while the slot is in use,
-- and again.
-- KEYS[1]: jobs hash   KEYS[2]: queue table   KEYS[3]: transit hash
-- KEYS[4]: the slot's guard (never read: see `SlotKeys::guard`)
-- Returns the number of jobs counted.
local t = tally()
local qname = qnames(KEYS[2])
local jobs = 0
local cursor = '0'
repeat
  local r = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 1000)
  cursor = r[1]
  local kv = r[2]
  for x = 1, #kv, 2 do
    local _, qn = head(kv[x + 1])
    t.use(qname(qn), 1, job_bytes(kv[x], kv[x + 1]))
    jobs = jobs + 1
  end
until cursor == '0'
repeat
  local r = redis.call('HSCAN', KEYS[3], cursor, 'COUNT', 1000)
  cursor = r[1]
  local kv = r[2]
  for x = 1, #kv, 2 do
    local e = transit_unpack(kv[x + 1])
    if e then
      t.use(e.queue, 1, job_bytes(kv[x], e.raw))
      jobs = jobs + 1
    end
  end
until cursor == '0'
redis.call('DEL', usage_key(KEYS[1]))
t.flush(KEYS[1])
return jobs
