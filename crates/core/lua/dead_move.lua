-- Respawns or deletes up to `limit` jobs from a queue's dead letter in one
-- slot. Respawned jobs go to the tail of the ready list with one try and a
-- new TTL.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's dead list   KEYS[5]: the queue's ready list
-- KEYS[6]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: limit   ARGV[2]: 'respawn' or 'delete'
-- ARGV[3]: new ttl ms for respawned jobs (0 = never expire)   ARGV[4]: ready channel
-- ARGV[5]: qualified queue   ARGV[6]: timer channel   ARGV[7]: slot number
-- Returns: {entries popped, jobs moved}; call again while jobs moved == limit.
local limit, mode, ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local jkey, tkey, ckey = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local before = nil
if mode == 'respawn' and ttl > 0 then before = next_wake(tkey, slot_prefix(tkey) .. 's') end
local popped, moved = 0, 0
while moved < limit do
  local id = redis.call('RPOP', KEYS[4])
  if not id then break end
  popped = popped + 1
  local raw = redis.call('HGET', jkey, id)
  if raw then
    local r = decode(raw)
    r.queue = ARGV[5]
    if r.state == DEAD then
      if expired(r, now) or mode == 'delete' then
        drop(jkey, tkey, ckey, id, r)
        if mode == 'delete' then moved = moved + 1 end
      else
        respawn(jkey, tkey, ckey, KEYS[5], id, r, ttl, now)
        moved = moved + 1
      end
    end
  end
end
if mode == 'respawn' and moved > 0 then
  announce(ARGV[4], moved)
  announce_expiry(before, now, ttl, ARGV[6], ARGV[7])
end
return { popped, moved }
