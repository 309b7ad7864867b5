-- Deletes (acknowledges) jobs of one queue in one slot, each in whatever
-- state it is: one call serves the acks that arrived together (group
-- commit), and each id is deleted, or not found, on its own.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's ready list   KEYS[5]: the queue's dead list   KEYS[6]: queue table
-- ARGV[1]: qualified queue   ARGV[2..]: job ids
-- Returns: per id, the state the job was in (1..4), or 0 when no such job
-- exists in that queue (an id given twice is found the first time only).
-- Only a record's leading fields are read, and the records and timer
-- entries go with one HDEL and one ZREM for the whole call; an id of a
-- ready or dead job then leaves its list (`unlist`).
local queue = ARGV[1]
local jkey, tkey, ckey = KEYS[1], KEYS[2], KEYS[3]
local qn = qn_of(KEYS[6], queue)
local out, gone, ids, listed = {}, {}, {}, {}
local t = tally()
for i = 2, #ARGV do
  local id = ARGV[i]
  local raw = qn and not gone[id] and redis.call('HGET', jkey, id)
  local state = 0
  if raw then
    local st, q = head(raw)
    if q == qn then
      state = st
      gone[id] = true
      ids[#ids + 1] = id
      t.state(st, queue, -1)
      if st == READY or st == DEAD then listed[#listed + 1] = i end
    end
  end
  out[#out + 1] = state
end
if #ids > 0 then
  call_many('HDEL', jkey, ids, 1)
  call_many('ZREM', tkey, ids, 1)
  t.flush(ckey)
  for _, i in ipairs(listed) do
    local st = out[i - 1]
    local lkey = KEYS[4]
    if st == DEAD then lkey = KEYS[5] end
    unlist(lkey, jkey, ckey, st, queue, ARGV[i])
  end
end
return out
