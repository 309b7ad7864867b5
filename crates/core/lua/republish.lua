-- Replaces a job by a new one in the same bucket, atomically: the old job
-- (if it still exists in that queue) is deleted and the new one published.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: ready list
-- ARGV[1]: queue   ARGV[2]: delay ms   ARGV[3]: ttl ms   ARGV[4]: tries
-- ARGV[5]: ready channel   ARGV[6]: timer channel   ARGV[7]: bucket tag
-- ARGV[8]: old job id   ARGV[9]: new job id   ARGV[10]: attrs   ARGV[11]: body
-- Returns: 1 when the old job existed, else 0; or an error reply `EXISTS <id>` and no change.
local queue, delay, ttl, tries = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local old, id = ARGV[8], ARGV[9]
if redis.call('HEXISTS', KEYS[1], id) == 1 then
  return redis.error_reply('EXISTS ' .. id)
end
local existed = 0
local raw = redis.call('HGET', KEYS[1], old)
if raw then
  local o = decode(raw)
  if o.queue == queue then
    drop(KEYS[1], KEYS[2], KEYS[3], old, o)
    existed = 1
  end
end
local now = now_ms()
local r = fresh(queue, delay, ttl, tries, now)
r.attrs, r.body = ARGV[10], ARGV[11]
put(KEYS[1], KEYS[2], KEYS[4], id, r, now + delay, ARGV[6], ARGV[7])
count(KEYS[3], r.state, queue, 1)
if r.state == READY then redis.call('PUBLISH', ARGV[5], 1) end
return existed
