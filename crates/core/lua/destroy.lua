-- Deletes a batch of a queue's ready jobs in one slot (lmstfy's destroy:
-- delayed, reserved and dead jobs are kept).
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: the queue's ready list
-- KEYS[5]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: batch limit (list entries popped, stale ones included)   ARGV[2]: qualified queue
-- Returns: {entries popped, jobs deleted}; call again while entries popped > 0.
local limit = tonumber(ARGV[1])
local popped, deleted = 0, 0
while popped < limit do
  local id = redis.call('RPOP', KEYS[4])
  if not id then break end
  popped = popped + 1
  local raw = redis.call('HGET', KEYS[1], id)
  if raw then
    local r = decode(raw)
    r.queue = ARGV[2]
    if r.state == READY then
      drop(KEYS[1], KEYS[2], KEYS[3], id, r)
      deleted = deleted + 1
    end
  end
end
return { popped, deleted }
