-- A namespace's backlog quota (`max_jobs`, `max_bytes`), on the admin
-- Redis, so that it holds across gateways and the pumps that fire its
-- schedules. What the namespace holds is
-- kept in the slots of its pool (`use` in `lua/lib/counts.lua`), where no one script
-- can read it whole; so this keeps:
-- - a snapshot of that usage (`jobs`, `bytes`), read from the slots after
--   `at` (µs, this Redis's clock: `begin`);
-- - the admissions that the snapshot may not hold yet, each an entry
--   `e:<id>` → "<jobs> <bytes>", summed in `oj` and `ob`: pending (in
--   KEYS[2], by admission time, ms) until the writer says the write ended
--   (`done`), then in KEYS[3] by the time it ended (µs), until a snapshot
--   that began after that time holds it.
-- The estimate, snapshot + open entries, is never under what the slots
-- hold (a write that ended before a snapshot began was read by it), and
-- over it only by what left since the snapshot and writes that ended
-- after it began. A pending entry whose writer never said how its write
-- ended is taken as ended after ARGV's stale time (so it stays counted
-- until a snapshot begun after that holds it).
-- KEYS[1]: the namespace's hash   KEYS[2]: pending entries (zset)
-- KEYS[3]: ended entries (zset)
-- ARGV[1]: mode
--   'admit', ARGV[2..7]: entry id, jobs, bytes, max jobs (0 = none),
--     max bytes (0 = none), stale ms. Returns {1, jobs, bytes, age ms}
--     (admitted; the estimate before it), {0, 'max_jobs' or 'max_bytes',
--     jobs, bytes, age ms} (refused, nothing kept), or {-1} (no snapshot).
--   'done', ARGV[2..3]: entry id, '1' when the write stored its jobs (or
--     may have), '0' when it stored nothing; with ARGV[4..5], the jobs and
--     bytes it stored, when fewer than admitted (a pump's fires: the entry
--     keeps no more than those). Returns 1.
--   'begin': returns this Redis's time, µs.
--   'snapshot', ARGV[2..4]: the time `begin` gave, jobs, bytes. Returns 1,
--     or 0 when a snapshot that began later is there already.
-- Every key lives a day past its last write (a namespace that stops
-- publishing leaves nothing for good).
local h, pending, ended = KEYS[1], KEYS[2], KEYS[3]
local mode = ARGV[1]
local KEEP_MS = 86400000
local function micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function keep()
  for _, k in ipairs({ h, pending, ended }) do redis.call('PEXPIRE', k, KEEP_MS) end
end
-- Closes entries `ids`: their jobs and bytes leave the open sums.
local function close(ids, from)
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', h, 'e:' .. id)
    if v then
      local jobs, bytes = string.match(v, '^(%d+) (%d+)$')
      -- `0 - n`, not `-n`: Redis reads a Lua -0 as "-0", not an integer.
      redis.call('HINCRBY', h, 'oj', 0 - tonumber(jobs))
      redis.call('HINCRBY', h, 'ob', 0 - tonumber(bytes))
      redis.call('HDEL', h, 'e:' .. id)
    end
    redis.call('ZREM', from, id)
  end
end

if mode == 'begin' then
  return micros()
end

if mode == 'snapshot' then
  local t0 = tonumber(ARGV[2])
  local at = tonumber(redis.call('HGET', h, 'at') or '-1')
  if at >= t0 then return 0 end
  redis.call('HSET', h, 'at', ARGV[2], 'jobs', ARGV[3], 'bytes', ARGV[4])
  close(redis.call('ZRANGEBYSCORE', ended, '-inf', '(' .. ARGV[2]), ended)
  keep()
  return 1
end

if mode == 'done' then
  local id = ARGV[2]
  if redis.call('ZREM', pending, id) == 0 then return 1 end
  if ARGV[3] == '1' and ARGV[4] then
    local v = redis.call('HGET', h, 'e:' .. id)
    if v then
      local jobs, bytes = string.match(v, '^(%d+) (%d+)$')
      jobs, bytes = tonumber(jobs), tonumber(bytes)
      local kj = math.min(jobs, tonumber(ARGV[4]))
      local kb = math.min(bytes, tonumber(ARGV[5]))
      redis.call('HINCRBY', h, 'oj', kj - jobs)
      redis.call('HINCRBY', h, 'ob', kb - bytes)
      redis.call('HSET', h, 'e:' .. id, kj .. ' ' .. kb)
    end
  end
  if ARGV[3] == '1' then
    redis.call('ZADD', ended, micros(), id)
  else
    close({ id }, ended)
  end
  keep()
  return 1
end

-- 'admit'
local id, jobs, bytes = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local max_jobs, max_bytes, stale = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = math.floor(micros() / 1000)
local state = redis.call('HMGET', h, 'at', 'jobs', 'bytes', 'oj', 'ob')
if not state[1] then return { -1 } end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', pending, '-inf', now - stale, 'LIMIT', 0, 100)) do
  redis.call('ZREM', pending, old)
  redis.call('ZADD', ended, micros(), old)
end
local held_jobs = tonumber(state[2]) + tonumber(redis.call('HGET', h, 'oj') or '0')
local held_bytes = tonumber(state[3]) + tonumber(redis.call('HGET', h, 'ob') or '0')
local age = math.max(0, now - math.floor(tonumber(state[1]) / 1000))
if max_jobs > 0 and held_jobs + jobs > max_jobs then
  return { 0, 'max_jobs', held_jobs, held_bytes, age }
end
if max_bytes > 0 and held_bytes + bytes > max_bytes then
  return { 0, 'max_bytes', held_jobs, held_bytes, age }
end
redis.call('HSET', h, 'e:' .. id, jobs .. ' ' .. bytes)
redis.call('HINCRBY', h, 'oj', jobs)
redis.call('HINCRBY', h, 'ob', bytes)
redis.call('ZADD', pending, now, id)
keep()
return { 1, held_jobs, held_bytes, age }
