-- Applies schedules' definitions to their slot, or removes them (see
-- `lua/lib/fires.lua`), for the pump process that holds the slot's lease.
-- A definition replaces the slot's only when its revision is newer, so
-- that a pump with an older copy of the schedule table changes nothing. A
-- new or revised schedule's plan is emptied and it is due to be planned
-- at once: its fires start after now (a revision never fires a time that
-- passed before it), and its counts and last fire are kept. A paused one
-- leaves the fire zset.
-- KEYS[1]: definitions hash   KEYS[2]: fire states hash   KEYS[3]: fire zset
-- KEYS[4]: the slot's lease   KEYS[5]: the slot's guard (never read)
-- ARGV[1]: the lease owner this pump acts for ("" = no lease)
-- ARGV[2]: timer channel   ARGV[3]: slot number (the timer channel's message)
-- ARGV[4..]: per schedule: member, revision, then its packed definition,
--   or "" to remove the member when its revision is at most that one
-- Returns {-1} and no change when ARGV[1] does not hold the lease, else
-- per schedule 1 (written, or removed) or 0 (the slot's is as new or
-- newer, or there was none to remove).
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return { -1 }
end
local now = now_ms()
local dkey, skey, fkey = KEYS[1], KEYS[2], KEYS[3]
local out, due = {}, false
for i = 4, #ARGV, 3 do
  local member, rev, def = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local old = redis.call('HGET', dkey, member)
  local old_rev = old and def_rev(old)
  if def == '' then
    if old and old_rev <= rev then
      redis.call('HDEL', dkey, member)
      redis.call('HDEL', skey, member)
      redis.call('ZREM', fkey, member)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  elseif old and old_rev >= rev then
    out[#out + 1] = 0
  else
    local raw = redis.call('HGET', skey, member)
    local st
    if raw then
      st = fire_state(raw)
      st.rev, st.cursor, st.plan, st.ended = rev, math.max(st.cursor, now), {}, '0'
    else
      st = new_fire_state(rev, now)
    end
    redis.call('HSET', dkey, member, def)
    redis.call('HSET', skey, member, fire_state_text(st))
    if fire_def(def).paused then
      redis.call('ZREM', fkey, member)
    else
      redis.call('ZADD', fkey, now, member)
      due = true
    end
    out[#out + 1] = 1
  end
end
if due then announce(ARGV[2], ARGV[3]) end
return out
