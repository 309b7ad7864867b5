-- Reads one job by id without changing it, here or in transit to
-- another shard (`move_out.lua`).
-- KEYS[1]: jobs hash   KEYS[2]: queue table   KEYS[3]: transit hash
-- ARGV[1]: qualified queue   ARGV[2]: job id
-- Returns: the `view` shape (`lua/lib/slot.lua`), or nil
-- when the job does not exist in that queue or has expired.
local raw = redis.call('HGET', KEYS[1], ARGV[2])
local r
if raw then
  r = decode(raw)
  if r.qn ~= qn_of(KEYS[2], ARGV[1]) then return nil end
else
  local v = redis.call('HGET', KEYS[3], ARGV[2])
  local e = v and transit_unpack(v)
  if not e or e.queue ~= ARGV[1] then return nil end
  r = decode(e.raw)
end
local now = now_ms()
if expired(r, now) then return nil end
r.queue = ARGV[1]
return view(r, ARGV[2], now)
