-- Deletes (acknowledges) one job in whatever state it is.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's ready list   KEYS[5]: the queue's dead list   KEYS[6]: queue table
-- ARGV[1]: qualified queue   ARGV[2]: job id
-- Returns: the state the job was in (1..4), or 0 when no such job exists in that queue.
local raw = redis.call('HGET', KEYS[1], ARGV[2])
if not raw then return 0 end
local r = decode(raw)
if r.qn ~= qn_of(KEYS[6], ARGV[1]) then return 0 end
r.queue = ARGV[1]
drop(KEYS[1], KEYS[2], KEYS[3], ARGV[2], r)
if r.state == READY then
  unlist(KEYS[4], KEYS[1], KEYS[3], READY, r.queue, ARGV[2])
elseif r.state == DEAD then
  unlist(KEYS[5], KEYS[1], KEYS[3], DEAD, r.queue, ARGV[2])
end
return r.state
