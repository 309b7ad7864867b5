-- Gives back a job that consume reserved for a client that went away before
-- it could be answered: the job goes back to the head of its ready list and
-- gets its try back. Fenced: nothing happens unless the job is still in the
-- reservation that consume made (same state, same TTR deadline).
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: ready list
-- KEYS[5]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: job id   ARGV[2]: the TTR deadline consume returned   ARGV[3]: ready channel
-- ARGV[4]: qualified queue
-- Returns: 1 when released, 0 otherwise.
local id, deadline = ARGV[1], tonumber(ARGV[2])
local raw = redis.call('HGET', KEYS[1], id)
if not raw then return 0 end
local r = decode(raw)
r.queue = ARGV[4]
if r.state ~= RESERVED then return 0 end
local due = deadline
if r.expire > 0 and r.expire < due then due = r.expire end
local score = redis.call('ZSCORE', KEYS[2], id)
if not score or tonumber(score) ~= due then return 0 end
count(KEYS[3], RESERVED, r.queue, -1)
r.state, r.tries = READY, r.tries + 1
redis.call('HSET', KEYS[1], id, patch(raw, READY, r.tries, r.delivered))
count(KEYS[3], READY, r.queue, 1)
redis.call('RPUSH', KEYS[4], id)
arm_expiry(KEYS[2], id, r)
announce(ARGV[3], 1)
return 1
