-- How long the next ready job of each of some queues in one slot has been
-- ready: the job a consumer would take next, at the consume end of the
-- list (`ready_since`). Reads only.
-- KEYS[1]: jobs hash   KEYS[2..]: the queues' ready lists
-- ARGV[1]: how many stale entries (deleted or expired jobs) to skip at most per list
-- Returns: per list, in KEYS order, the age in ms, or -1 when no live job was found.
local now = now_ms()
local scan = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local _, r = first_live(KEYS[1], KEYS[i], READY, now, scan)
  if r then
    out[#out + 1] = math.max(0, now - ready_since(r))
  else
    out[#out + 1] = -1
  end
end
return out
