-- Stores copies of jobs that `move_out.lua` took out of this slot's old
-- shard, each as it was there: its state, tries, attributes, body, and its
-- times moved onto this shard's clock (publish, expiry, due or death time,
-- TTR deadline), so that a delayed job is due when it was due. Ready and
-- dead jobs are appended at the consuming end of their list, in the order
-- given (newest first), so that they come before the jobs written here
-- since. A job already here is skipped, and so is one copied here before
-- from the same take: with `mark`, each copy is remembered in the slot's
-- copy marks (`sd:T:i`, id → the take's tag) until the mover removes the
-- mark, once the job's transit entry at the old shard is gone for good, so
-- that a copy made again (after a crash of the mover or of a Redis, or by
-- a mover that lost its lease) does not bring back a job acked here since.
-- A mark left by a mover that died before removing it never hides a later
-- take of the same job (moved away and back): its tag differs. The key
-- expires a day after its last mark, as a backstop.
-- KEYS[1]: jobs hash   KEYS[2]: timer zset   KEYS[3]: counters hash   KEYS[4]: queue table
-- KEYS[5]: wheel index zset   KEYS[6]: copy marks zset
-- KEYS[7]: the slot's guard (never read: see `SlotKeys::guard`)
-- ARGV[1]: slot key prefix   ARGV[2]: timer channel   ARGV[3]: slot number
-- ARGV[4]: ready channel prefix (channel = prefix .. queue)
-- ARGV[5]: the old shard's time when it gave the entries (ms)   ARGV[6]: `1` to mark the copies
-- ARGV[7..]: per job, id and transit entry
-- Returns {copied, skipped}.
local now = now_ms()
local shift = now - tonumber(ARGV[5])
local mark = ARGV[6] == '1'
local jkey, tkey, ckey, ikey = KEYS[1], KEYS[2], KEYS[3], KEYS[6]
local k = { j = jkey, t = tkey, s = KEYS[5], prefix = ARGV[1] }
local wake = next_wake(tkey, KEYS[5])
local t = tally()
local ready, marks = {}, {}
local copied, skipped = 0, 0
local function moved(at)
  if at == 0 then return 0 end
  return math.max(1, at + shift)
end
for i = 7, #ARGV, 2 do
  local id = ARGV[i]
  local e = transit_unpack(ARGV[i + 1])
  if e == nil or redis.call('HEXISTS', jkey, id) == 1
      or (mark and tonumber(redis.call('ZSCORE', ikey, id) or '-1') == e.tag) then
    skipped = skipped + 1
  else
    local r = decode(e.raw)
    r.queue, r.qn = e.queue, qn_make(KEYS[4], e.queue)
    r.pub = math.max(0, r.pub + shift)
    r.expire = moved(r.expire)
    r.due = moved(r.due)
    r.keyend = moved(r.keyend)
    redis.call('HSET', jkey, id, encode(r))
    -- Its key names it here, unless a job published here since took it.
    if r.key ~= '' then
      redis.call('HSETNX', ARGV[1] .. 'k', key_field(r.qn, r.key), id)
    end
    if r.state == DELAYED then
      wake = delay(k, id, r.due, now, wake, ARGV[2], ARGV[3])
    elseif r.state == RESERVED then
      local at = moved(e.deadline)
      if at == 0 then at = now end
      redis.call('ZADD', tkey, at, id)
      if wake == nil or at < wake then
        announce(ARGV[2], ARGV[3])
        wake = at
      end
    else
      if r.state == DEAD then
        redis.call('RPUSH', ARGV[1] .. 'd:' .. r.queue, id)
      else
        push_ready(ARGV[1] .. 'r:' .. r.queue, id, r.priority, true)
      end
      local at = place_expiry(tkey, id, r, now)
      if at and (wake == nil or at < wake) then
        announce(ARGV[2], ARGV[3])
        wake = at
      end
      if r.state == READY then ready[r.queue] = (ready[r.queue] or 0) + 1 end
    end
    t.state(r.state, r.queue, 1)
    t.use(r.queue, 1, job_bytes(id, e.raw))
    if mark then
      marks[#marks + 1] = e.tag
      marks[#marks + 1] = id
    end
    copied = copied + 1
  end
end
t.flush(ckey)
if #marks > 0 then
  call_many('ZADD', ikey, marks, 2)
  redis.call('PEXPIRE', ikey, 86400000)
end
for queue, n in pairs(ready) do announce(ARGV[4] .. queue, n) end
return { copied, skipped }
