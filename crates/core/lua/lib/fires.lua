-- The shared helpers, part 7 of 7: a schedule as its slot holds it.
-- A schedule (`<ns>/<queue>/<name>`, its member) lives in the slot of its
-- queue's lane (see `src/keys.rs`; the lane of its job's idempotency key
-- when it has one) in three keys:
--   `sd:T:sc` hash: member → its definition, packed with `struct`:
--     rev I6, grace_ms I4, paused B, ttl_ms I6, tries H, priority B,
--     policy Bc0, attributes Hc0 (the JSON object of its job's attributes
--     without its closing brace: the fire's time is appended), timing Hc0
--     (JSON, read by the pumps' Rust only), the job's idempotency key Hc0
--     ("" for none: see `lua/lib/keys.lua`) and its window I6 (ms; 0:
--     until the job is done), then the job's body;
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
--           (ms; for one written ahead, its due time), and its job's id
--           (0, 0, `-` before the first);
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

-- How long a schedule waiting for its plan waits before it is asked for
-- again (a pump that asked and died before it planned).
local REPLAN_MS = 1000

-- A state read: its head's fields, and its planned fires (`plan`) kept as
-- the text they are stored as ("" for none). The fire script takes one
-- planned fire at a time from the front (`planned`, `plan_rest`), so
-- a fire costs the same however many fires are planned after it: a plan
-- split into one string per entry would cost a fire every entry's.
local function fire_state(raw)
  local rev, cursor, fired, missed, last, last_at, last_id, ended, plan =
    string.match(raw, '^(%d+) (%d+) (%d+) (%d+) (%S+) (%S+) (%S+) (%S+) ?(.*)$')
  return { rev = tonumber(rev), cursor = tonumber(cursor), fired = tonumber(fired),
           missed = tonumber(missed), last = last, last_at = last_at, last_id = last_id,
           ended = ended, plan = plan }
end

-- A fresh state at revision `rev`, whose fires start after `now`.
local function new_fire_state(rev, now)
  return { rev = rev, cursor = now, fired = 0, missed = 0, last = '0', last_at = '0', last_id = '-',
           ended = '0', plan = '' }
end

-- The planned fire `entry`, or the first of plan text `entry`: its time,
-- due time, job id and how.
local function planned(entry)
  local at, due, id, how = string.match(entry, '^(%d+):(%d+):([^:]+):(%a)')
  return tonumber(at), tonumber(due), id, how
end

-- Plan text `plan` without its first planned fire.
local function plan_rest(plan)
  local gap = string.find(plan, ' ', 1, true)
  if not gap then return '' end
  return string.sub(plan, gap + 1)
end

local function fire_state_text(st)
  local head = string.format('%d %d %d %d %s %s %s %s', st.rev, st.cursor, st.fired, st.missed,
    st.last, st.last_at, st.last_id, st.ended)
  if st.plan == '' then return head end
  return head .. ' ' .. st.plan
end

-- The revision of packed definition `def`.
local function def_rev(def)
  return (struct.unpack('>I6', def))
end

-- Unpacks definition `def`: its fields, and its body.
local function fire_def(def)
  local rev, grace, paused, ttl, tries, priority, policy, attrs, timing, key, window, pos =
    struct.unpack('>I6I4BI6HBBc0Hc0Hc0Hc0I6', def)
  return { rev = rev, grace = grace, paused = paused == 1, ttl = ttl, tries = tries, priority = priority,
           policy = policy, attrs = attrs, timing = timing, key = key, window = window,
           body = string.sub(def, pos) }
end
