-- Reads one job by id without changing it.
-- KEYS[1]: jobs hash   KEYS[2]: queue table
-- ARGV[1]: qualified queue   ARGV[2]: job id
-- Returns: {queue, id, elapsed_ms, ttl_ms, tries left, attrs, body, state}, or nil
-- when the job does not exist in that queue or has expired.
local raw = redis.call('HGET', KEYS[1], ARGV[2])
if not raw then return nil end
local r = decode(raw)
local now = now_ms()
if r.qn ~= qn_of(KEYS[2], ARGV[1]) or expired(r, now) then return nil end
r.queue = ARGV[1]
return view(r, ARGV[2], now)
