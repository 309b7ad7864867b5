-- The shared helpers, part 3 of 7: idempotency keys. See `record.lua`.
--
-- A job published with a key (`dedup`) carries it in its record (flag 128,
-- see `record.lua`), and the slot's key index (`sd:T:k`, a hash) maps
-- `<queue number>:<key>` to the id of the latest job of that queue
-- published with it, while that job lives. When the job leaves for good
-- (acked, deleted, expired, dropped from the dead letter) its entry goes;
-- a job published with a window (`dedup_ttl`) that leaves before its
-- window ends leaves a tombstone instead, `sd:T:k:<ns>/<queue>:<key>` →
-- its id, a string that Redis itself expires when the window ends. So no
-- key ever needs a scan, and the keys of a slot live in the slot. (A
-- tombstone is named by its queue's name, not its number: it may outlive
-- the slot's queue table, which goes when the slot is left empty.)
-- The index's field `~w` holds the latest end of a window that a
-- tombstone of the slot keeps (ms; a field of no queue, whose numbers are
-- digits): while it is absent or past, the slot has no tombstone, and a
-- publish need not look for one (`keys_named`, which drops a past one).
local WINDOWS = '~w'

-- As `packer`, for keyed records of fresh record `r`: returns a function
-- of a job's key, its window's end (`keyend`, 0 for none), attributes and
-- body that packs its record (`encode` of the same fields gives the same
-- bytes), for the common case of a publish with keys, without a decoded
-- record per job.
local function key_packer(r)
  local state = r.state + EXTENDED + KEYED
  if r.delivered then state = state + 16 end
  local p = r.priority or 0
  local level = ''
  if p > 0 then state, level = state + PRIORITIZED, string.char(p) end
  local policy = r.policy or ''
  local fixed = struct.pack('>BHI6I6I6I3I4Bc0H', state, r.tries, r.pub, r.expire, r.due or 0, r.qn,
    0, #policy, policy, 0)
  return function(key, keyend, attrs, body)
    return fixed .. struct.pack('>I6H', keyend, #key) .. key .. level .. struct.pack('>H', #attrs) .. attrs
      .. body
  end
end

-- The index field of `key` in the queue numbered `qn`.
local function key_field(qn, key)
  return qn .. ':' .. key
end

-- The tombstone of `key` in the queue `queue` (`<ns>/<queue>`), of the
-- slot whose key prefix is `prefix`.
local function key_tomb(prefix, queue, key)
  return prefix .. 'k:' .. queue .. ':' .. key
end

-- After job `id` (record `rec`: raw, or decoded) left the slot: its key,
-- if it has one and the key still names it, no longer does. With its
-- queue `queue` (the job is gone for good; nil: it moved to another
-- shard), a window still open at `now` (read from the clock when nil) is
-- kept as a tombstone. `slot_key` is any key of the slot.
local function unkey(slot_key, id, rec, queue, now)
  if type(rec) == 'string' then
    if string.byte(rec, 1) < KEYED then return end
    rec = decode(rec)
  end
  if not rec.key or rec.key == '' then return end
  local prefix = string.sub(slot_key, 1, -2)
  local field = key_field(rec.qn, rec.key)
  local index = redis.call('HMGET', prefix .. 'k', field, WINDOWS)
  if index[1] ~= id then return end
  redis.call('HDEL', prefix .. 'k', field)
  if queue and rec.keyend > 0 then
    now = now or now_ms()
    if rec.keyend > now then
      redis.call('SET', key_tomb(prefix, queue, rec.key), id, 'PX', rec.keyend - now)
      if not index[2] or tonumber(index[2]) < rec.keyend then
        redis.call('HSET', prefix .. 'k', WINDOWS, rec.keyend)
      end
    end
  end
end

-- What the index `fields` (of queue `queue`; a field may come twice, and
-- `keys` holds each one's key, in the same order) name at `now`, read
-- with a few commands whatever their number: field → the id of the job
-- the key names (live, its window open) or of a tombstone; and field →
-- that job's decoded record, for a job that lives. Tombstones are looked
-- for only while one may be there (`WINDOWS`).
local function keys_named(prefix, jkey, queue, fields, keys, now)
  local named, jobs, ids, of = {}, {}, {}, {}
  fields[#fields + 1] = WINDOWS
  local found = hmget_many(prefix .. 'k', fields)
  fields[#fields] = nil
  local windows = found[#found]
  for x = 1, #fields do
    if found[x] then
      ids[#ids + 1] = found[x]
      of[#ids] = fields[x]
    end
  end
  local raws = hmget_many(jkey, ids)
  for x = 1, #ids do
    if raws[x] then
      local r = decode(raws[x])
      if not expired(r, now) and (r.keyend == 0 or r.keyend > now) then
        named[of[x]], jobs[of[x]] = ids[x], r
      end
    end
  end
  if not windows then return named, jobs end
  if tonumber(windows) <= now then
    -- Every tombstone of the slot has expired: the marker goes too.
    redis.call('HDEL', prefix .. 'k', WINDOWS)
    return named, jobs
  end
  local asked, at = {}, {}
  for x = 1, #fields do
    if not named[fields[x]] then
      asked[#asked + 1] = key_tomb(prefix, queue, keys[x])
      at[#asked] = fields[x]
    end
  end
  for c = 1, #asked, 1000 do
    local got = redis.call('MGET', unpack(asked, c, math.min(c + 999, #asked)))
    for x = 1, #got do
      if got[x] then named[at[c + x - 1]] = got[x] end
    end
  end
  return named, jobs
end
