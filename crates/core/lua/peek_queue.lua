-- Reads the next ready job of a queue in one slot, without changing anything.
-- KEYS[1]: jobs hash   KEYS[2]: the queue's ready list (and its priority
-- levels' lists: the next job is in the highest level that holds one)
-- KEYS[3]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: how many stale entries to skip at most   ARGV[2]: qualified queue
-- Returns: the `view` shape (`lua/lib/slot.lua`), or nil.
local now = now_ms()
local id, r
for _, lkey in ipairs(ready_lists(KEYS[2])) do
  id, r = first_live(KEYS[1], lkey, READY, now, tonumber(ARGV[1]))
  if id then break end
end
if not id then return nil end
r.queue = ARGV[2]
return view(r, id, now)
