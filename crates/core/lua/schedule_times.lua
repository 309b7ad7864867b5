-- Stores the fires the pumps planned for schedules of one slot (see
-- `lua/lib/fires.lua`), over the state they planned from: a schedule whose
-- revision or cursor moved since (it fired, or was revised), or that was
-- parked since, is left as it is, and asks again when it needs a plan. A
-- plan replaces the schedule's planned fires, moves its cursor past the
-- missed fires it skipped (and counts them), and arms its first fire; a
-- plan of no fire ends the schedule (it has no fire left) until it is
-- revised.
-- The pump that planned is the slot's own loop, which sleeps until the
-- next fire this returns: no one else needs telling.
-- KEYS[1]: fire states hash   KEYS[2]: fire zset   KEYS[3]: the slot's lease
-- KEYS[4]: the slot's guard (never read)
-- ARGV[1]: the lease owner this pump acts for ("" = no lease)
-- ARGV[2..]: per schedule: member, revision and cursor planned from, the
--   new cursor, the missed fires skipped, then the planned fires
--   (`<time>:<due>:<id>:<how>`, separated by single spaces as
--   `PlannedFire::join` writes them, in due order; "" for none)
-- Returns {-1} and no change when ARGV[1] does not hold the lease, else
-- the slot's next fire (ms; -1: none), then per schedule 1 (stored) or 0
-- (stale, or the schedule is gone).
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return { -1 }
end
local skey, fkey = KEYS[1], KEYS[2]
local out = { 0 }
for i = 2, #ARGV, 6 do
  local member, rev, cursor = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local raw = redis.call('HGET', skey, member)
  local st = raw and fire_state(raw)
  -- A parked schedule (its slot or namespace moved) fires nothing here,
  -- and its place stays parked whatever was planned for it before.
  if not st or st.rev ~= rev or st.cursor ~= cursor or st.ended == 'p' then
    out[#out + 1] = 0
  else
    st.cursor = math.max(st.cursor, tonumber(ARGV[i + 3]))
    st.missed = st.missed + tonumber(ARGV[i + 4])
    st.plan = ARGV[i + 5]
    if st.plan == '' then
      st.ended = '1'
      redis.call('ZREM', fkey, member)
    else
      local _, due = planned(st.plan)
      redis.call('ZADD', fkey, due, member)
    end
    redis.call('HSET', skey, member, fire_state_text(st))
    out[#out + 1] = 1
  end
end
out[1] = zmin(fkey) or -1
return out
