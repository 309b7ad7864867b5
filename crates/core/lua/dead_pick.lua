-- Respawns or deletes chosen jobs of a queue's dead letter in one slot.
-- A respawned job goes to the head of the ready list with one try and a
-- new TTL, as with `dead_move.lua`.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash
-- KEYS[4]: the queue's dead list   KEYS[5]: the queue's ready list
-- KEYS[6]: queue table   KEYS[7]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: 'respawn' or 'delete'   ARGV[2]: new ttl ms for respawned jobs (0 = never expire)
-- ARGV[3]: ready channel   ARGV[4]: qualified queue   ARGV[5]: timer channel
-- ARGV[6]: slot number   ARGV[7...]: job ids
-- Returns: per id, 1 when done, 0 when it is not a live dead job of this
-- queue here.
local mode, ttl, queue = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local jkey, tkey, ckey, dkey, rkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local qn = qn_of(KEYS[6], queue)
local now = now_ms()
local out, respawned = {}, 0
local before = nil
if mode == 'respawn' and ttl > 0 then before = next_wake(tkey, slot_prefix(tkey) .. 's') end
for i = 7, #ARGV do
  local id = ARGV[i]
  local raw = qn and redis.call('HGET', jkey, id)
  local done = 0
  if raw then
    local r = decode(raw)
    if r.state == DEAD and r.qn == qn and not expired(r, now) then
      done = 1
      if mode == 'delete' then
        remove(jkey, tkey, ckey, rkey, dkey, queue, id, r)
      else
        r.queue = queue
        respawn(jkey, tkey, ckey, rkey, id, r, ttl, now)
        unlist(dkey, jkey, ckey, DEAD, queue, id)
        respawned = respawned + 1
      end
    end
  end
  out[#out + 1] = done
end
if respawned > 0 then
  announce(ARGV[3], respawned)
  announce_expiry(before, now, ttl, ARGV[5], ARGV[6])
end
return out
