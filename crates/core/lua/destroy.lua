-- Deletes a batch of a queue's ready jobs in one slot (lmstfy's destroy:
-- delayed, reserved and dead jobs are kept).
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's ready list (and its priority levels' lists)
-- KEYS[5]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: batch limit (list entries popped, stale ones included)   ARGV[2]: qualified queue
-- Returns: {entries popped, jobs deleted}; call again while entries popped > 0.
local limit = tonumber(ARGV[1])
local popped, deleted = 0, 0
local lists, levels = ready_lists(KEYS[4])
local l = 1
while popped < limit and l <= #lists do
  local id = redis.call('RPOP', lists[l])
  if id then
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
  else
    -- This level is empty: it goes from the queue's levels.
    if levels[l] > 0 then unmark_level(KEYS[4], levels[l]) end
    l = l + 1
  end
end
return { popped, deleted }
