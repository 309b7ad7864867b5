-- Applies schedules' definitions to their slot, parks them, or removes
-- them (see `lua/lib/fires.lua`), for the pump process that holds the
-- slot's lease. A definition replaces the slot's only when its revision
-- is newer (or the same with other bytes: the queue's retry policy
-- changed), so that a pump with an older copy of the schedule table
-- changes nothing; over a parked state any revision applies. A schedule
-- that is new here takes over the state it is given (`adopt`: its state
-- parked where it lived before a move), else starts afresh; a revision
-- empties its plan, and a newer one fires from now on (never a time that
-- passed before it), while its counts and last fire are kept. It is then
-- due to be planned at once; a paused one leaves the fire zset. Parking
-- empties a schedule's plan and takes it off the fire zset, its state
-- kept for the place it moved to.
-- KEYS[1]: definitions hash   KEYS[2]: fire states hash   KEYS[3]: fire zset
-- KEYS[4]: the slot's lease   KEYS[5]: the slot's guard (never read)
-- ARGV[1]: the lease owner this pump acts for ("" = no lease)
-- ARGV[2]: timer channel   ARGV[3]: slot number (the timer channel's message)
-- ARGV[4..]: per schedule: member, revision, what (its packed definition;
--   "" to remove it when its revision is at most that one; `drop` to
--   remove it so only while it is parked, as the place it moved to does
--   once it took it over; `park` to park it), then the state to adopt ("" for none)
-- Returns {-1} and no change when ARGV[1] does not hold the lease, else
-- per schedule 1 (written, parked or removed), 2 (a definition the slot
-- holds already, unchanged) or 0 (the slot's is newer, or there was none
-- to park or remove).
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return { -1 }
end
local now = now_ms()
local dkey, skey, fkey = KEYS[1], KEYS[2], KEYS[3]
local out, due = {}, false
-- Applies definition `def` of revision `rev` over `old` (the slot's
-- packed one) and `raw` (its state), adopting `adopt` when new here.
local function apply(member, rev, def, old, raw, adopt)
  local st = raw and fire_state(raw)
  if old and st and st.ended ~= 'p' then
    if def_rev(old) > rev then return 0 end
    if def_rev(old) == rev and old == def then return 2 end
  end
  if (not st or st.ended == 'p') and adopt ~= '' then st = fire_state(adopt) end
  if st then
    if rev > st.rev then st.cursor = math.max(st.cursor, now) end
    st.rev, st.plan, st.ended = rev, '', '0'
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
  return 1
end
for i = 4, #ARGV, 4 do
  local member, rev, what, adopt = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local old = redis.call('HGET', dkey, member)
  local raw = redis.call('HGET', skey, member)
  if what == '' or what == 'drop' then
    local parked = raw and fire_state(raw).ended == 'p'
    if old and def_rev(old) <= rev and (what == '' or parked) then
      redis.call('HDEL', dkey, member)
      redis.call('HDEL', skey, member)
      redis.call('ZREM', fkey, member)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  elseif what == 'park' then
    if raw then
      local st = fire_state(raw)
      st.plan, st.ended = '', 'p'
      redis.call('HSET', skey, member, fire_state_text(st))
      redis.call('ZREM', fkey, member)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  else
    out[#out + 1] = apply(member, rev, what, old, raw, adopt)
  end
end
if due then announce(ARGV[2], ARGV[3]) end
return out
