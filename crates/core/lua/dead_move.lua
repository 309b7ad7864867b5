-- Respawns or deletes up to `limit` jobs from a queue's dead letter over the
-- buckets this shard holds. Respawned jobs go to the tail of the ready list
-- with one try and a new TTL.
-- KEYS[5b-4..5b] for b = 1..nb: jobs hash, timer zset, counters hash, dead list, ready list
-- ARGV[1]: nb   ARGV[2]: limit   ARGV[3]: 'respawn' or 'delete'
-- ARGV[4]: new ttl ms for respawned jobs (0 = never expire)   ARGV[5]: ready channel
-- Returns: {entries popped, jobs moved}; call again while jobs moved == limit.
local nb, limit, mode, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local popped, moved = 0, 0
for b = 1, nb do
  local k = bucket_keys(b, 5)
  while moved < limit do
    local id = redis.call('RPOP', k[4])
    if not id then break end
    popped = popped + 1
    local raw = redis.call('HGET', k[1], id)
    if raw then
      local r = decode(raw)
      if r.state == DEAD then
        if expired(r, now) or mode == 'delete' then
          drop(k[1], k[2], k[3], id, r)
          if mode == 'delete' then moved = moved + 1 end
        else
          count(k[3], DEAD, r.queue, -1)
          r.state, r.tries, r.expire = READY, 1, 0
          if ttl > 0 then r.expire = now + ttl end
          redis.call('HSET', k[1], id, encode(r))
          count(k[3], READY, r.queue, 1)
          redis.call('LPUSH', k[5], id)
          arm_expiry(k[2], id, r)
          moved = moved + 1
        end
      end
    end
  end
end
if mode == 'respawn' and moved > 0 then redis.call('PUBLISH', ARGV[5], moved) end
return { popped, moved }
