-- Takes up to `count` ready jobs from one or more queues of a namespace, over
-- the buckets of that namespace held by this shard: for each job, pop it,
-- spend a try, re-arm it for TTR, and return it, all in this one call.
-- Queues are served in the order given (strict priority); within a queue the
-- buckets are visited from a rotating start so none is starved.
-- KEYS[3b-2], KEYS[3b-1], KEYS[3b] for b = 1..nb: jobs hash, timer zset, counters hash
-- KEYS[3nb + (q-1)nb + b] for q = 1..nq, b = 1..nb: ready list of queue q in bucket b
-- ARGV[1]: nb   ARGV[2]: nq   ARGV[3]: count   ARGV[4]: ttr ms   ARGV[5]: start bucket (0-based)
-- ARGV[6]: timer channel   ARGV[6+b]: bucket tag of bucket b
-- Returns: a flat array of deliveries, 10 fields each:
--   queue, id, elapsed_ms, ttl_ms, tries left, attrs, body, state (3), bucket index (1-based),
--   1 if this is the job's first delivery else 0
-- and, last, the TTR deadline given to every job (ms, shard clock).
local nb, nq, want, ttr, start = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local deadline = now + ttr
local out, got = {}, 0

for q = 1, nq do
  for k = 0, nb - 1 do
    if got >= want then break end
    local b = (start + k) % nb + 1
    local jkey, tkey, ckey = KEYS[3 * b - 2], KEYS[3 * b - 1], KEYS[3 * b]
    local rkey = KEYS[3 * nb + (q - 1) * nb + b]
    while got < want do
      local id = redis.call('RPOP', rkey)
      if not id then break end
      local raw = redis.call('HGET', jkey, id)
      if raw then
        local r = decode(raw)
        if r.state == READY then
          if expired(r, now) then
            drop(jkey, tkey, ckey, id, r)
          else
            count(ckey, READY, r.queue, -1)
            local first = not r.delivered
            r.state, r.tries, r.delivered = RESERVED, r.tries - 1, true
            redis.call('HSET', jkey, id, encode(r))
            count(ckey, RESERVED, r.queue, 1)
            total(ckey, 'C', r.queue, 1)
            local due = deadline
            if r.expire > 0 and r.expire < due then due = r.expire end
            arm(tkey, id, due, ARGV[6], ARGV[6 + b])
            local v = view(r, id, now)
            for _, f in ipairs(v) do out[#out + 1] = f end
            out[#out + 1] = b
            if first then out[#out + 1] = 1 else out[#out + 1] = 0 end
            got = got + 1
          end
        end
      end
    end
  end
end

out[#out + 1] = deadline
return out
