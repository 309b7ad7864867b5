-- Lists part of a queue's dead letter in one slot, oldest first, without
-- changing anything.
-- KEYS[1]: jobs hash   KEYS[2]: the queue's dead list
-- ARGV[1]: how many list entries to pass over from the oldest end
-- ARGV[2]: how many entries to read after those
-- Returns: {entries in the list, entries read, server time (ms), id,
-- record, id, record, ...}:
-- the entries read that are live dead jobs (stale entries, of jobs that
-- left, and jobs past their TTL are left out).
local skip, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local len = redis.call('LLEN', KEYS[2])
local now = now_ms()
if n <= 0 or skip >= len then return { len, 0, now } end
-- Ids are pushed at the head: the oldest is at index -1.
local ids = redis.call('LRANGE', KEYS[2], -(skip + n), -(skip + 1))
local out = { len, #ids, now }
for i = #ids, 1, -1 do
  local raw = redis.call('HGET', KEYS[1], ids[i])
  if raw then
    local st, _, _, expire = head(raw)
    if st == DEAD and (expire == 0 or expire > now) then
      out[#out + 1] = ids[i]
      out[#out + 1] = raw
    end
  end
end
return out
