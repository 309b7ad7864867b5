-- The shared helpers, part 7 of 7: a schedule as its slot holds it.
-- A schedule (`<ns>/<queue>/<name>`, its member) lives in the slot of its
-- queue's lane (see `src/keys.rs`) in three keys:
--   `sd:T:sc` hash: member → its definition, packed with `struct`:
--     rev I6, grace_ms I4, paused B, ttl_ms I6, tries H, priority B,
--     policy Bc0, attributes Hc0 (the JSON object of its job's attributes
--     without its closing brace: the fire's time is appended), timing Hc0
--     (JSON, read by the pumps' Rust only), then the job's body;
--   `sd:T:sn` hash: member → its fire state (text, below);
--   `sd:T:f` zset: member → when its next planned fire is due (ms), or
--     when the pumps should plan its fires (its plan is empty).
-- A fire state is `<rev> <cursor> <fired> <missed> <last> <last_at>
-- <last_id> <ended>`, then one `<time>:<due>:<id>:<how>` per planned
-- fire, in due order:
--   rev     the revision of the definition the plan was made for;
--   cursor  the time of the last fire handled (fired, or found missed):
--           no fire at or before it is ever fired again;
--   fired, missed: fires published, and fires missed (counted by the plan
--           that skipped them);
--   last, last_at, last_id: the last fire's time, when it was published
--           (ms), and its job's id (0, 0, `-` before the first);
--   ended   1 when the schedule has no fire left (past its end), `p` when
--           it is parked: its slot moved (or its namespace did), the
--           place it moved to takes its state over (`schedule_set.lua`),
--           and it fires nothing here; else 0;
--   a planned fire: its time, when it is due (its time plus a jitter),
--   the id of the job it publishes, and `c` (fire however late: the plan
--   found it due already) or `n` (missed when found later than its
--   grace after it was due).
-- Fires are planned in Rust (cron and time zones: `sundial_router`'s
-- `schedule`), a few at a time (`schedule_times.lua`); the fire script
-- (`fire.lua`) publishes them and asks for more when few are left.

local FIRE_HEAD = 8
-- How long a schedule waiting for its plan waits before it is asked for
-- again (a pump that asked and died before it planned).
local REPLAN_MS = 1000

local function fire_state(raw)
  local t = {}
  for w in string.gmatch(raw, '%S+') do t[#t + 1] = w end
  local st = { rev = tonumber(t[1]), cursor = tonumber(t[2]), fired = tonumber(t[3]),
               missed = tonumber(t[4]), last = t[5], last_at = t[6], last_id = t[7],
               ended = t[8], plan = {} }
  for i = FIRE_HEAD + 1, #t do st.plan[#st.plan + 1] = t[i] end
  return st
end

-- A fresh state at revision `rev`, whose fires start after `now`.
local function new_fire_state(rev, now)
  return { rev = rev, cursor = now, fired = 0, missed = 0, last = '0', last_at = '0', last_id = '-',
           ended = '0', plan = {} }
end

-- The planned fire `entry`: its time, due time, job id and how.
local function planned(entry)
  local at, due, id, how = string.match(entry, '^(%d+):(%d+):([^:]+):(%a)$')
  return tonumber(at), tonumber(due), id, how
end

local function fire_state_text(st)
  local head = string.format('%d %d %d %d %s %s %s %s', st.rev, st.cursor, st.fired, st.missed,
    st.last, st.last_at, st.last_id, st.ended)
  if #st.plan == 0 then return head end
  return head .. ' ' .. table.concat(st.plan, ' ')
end

-- The revision of packed definition `def`.
local function def_rev(def)
  return (struct.unpack('>I6', def))
end

-- Unpacks definition `def`: its fields, and its body.
local function fire_def(def)
  local rev, grace, paused, ttl, tries, priority, policy, attrs, timing, pos =
    struct.unpack('>I6I4BI6HBBc0Hc0Hc0', def)
  return { rev = rev, grace = grace, paused = paused == 1, ttl = ttl, tries = tries, priority = priority,
           policy = policy, attrs = attrs, timing = timing, body = string.sub(def, pos) }
end
