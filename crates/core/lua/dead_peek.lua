-- Reads the head of a queue's dead letter in one slot.
-- KEYS[1]: jobs hash   KEYS[2]: the queue's dead list
-- ARGV[1]: how many stale entries to skip at most
-- Returns: {id, publish time (ms)} of the oldest live dead job, or nil.
local id, r = first_live(KEYS[1], KEYS[2], DEAD, now_ms(), tonumber(ARGV[1]))
if not id then return nil end
return { id, r.pub }
