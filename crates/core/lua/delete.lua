-- Deletes (acknowledges) jobs of one queue in one slot, each in whatever
-- state it is: one call serves the acks that arrived together (group
-- commit), and each id is deleted, or not found, on its own.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's ready list   KEYS[5]: the queue's dead list   KEYS[6]: queue table
-- ARGV[1]: qualified queue   ARGV[2..]: job ids
-- Returns: per id, the state the job was in (1..4), or 0 when no such job
-- exists in that queue (an id given twice is found the first time only).
local queue = ARGV[1]
local qn = qn_of(KEYS[6], queue)
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local raw = qn and redis.call('HGET', KEYS[1], id)
  local state = 0
  if raw then
    local r = decode(raw)
    if r.qn == qn then
      remove(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], queue, id, r)
      state = r.state
    end
  end
  out[#out + 1] = state
end
return out
