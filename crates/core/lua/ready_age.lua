-- How long the next ready job of each of some queues in one slot has been
-- ready: the job at the consume end of the list (`ready_since`); of a
-- queue with priorities, the longest any level's next job has waited (a
-- low level starved by higher ones shows). Reads only.
-- KEYS[1]: jobs hash   KEYS[2..n-1]: the queues' ready lists
-- KEYS[n]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: how many stale entries (deleted or expired jobs) to skip at most per list
-- Returns: per list, in KEYS order, the age in ms, or -1 when no live job was found.
local now = now_ms()
local scan = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS - 1 do
  local age = -1
  for _, lkey in ipairs(ready_lists(KEYS[i])) do
    local _, r = first_live(KEYS[1], lkey, READY, now, scan)
    if r then age = math.max(age, now - ready_since(r), 0) end
  end
  out[#out + 1] = age
end
return out
