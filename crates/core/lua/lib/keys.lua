-- The shared helpers, part 3 of 5: idempotency keys. See `record.lua`.
--
-- A job published with a key (`dedup`) carries it in its record (flag 128,
-- see `record.lua`), and the slot's key index (`sd:T:k`, a hash) maps
-- `<queue number>:<key>` to the id of the latest job of that queue
-- published with it, while that job lives. When the job leaves for good
-- (acked, deleted, expired, dropped from the dead letter) its entry goes;
-- a job published with a window (`dedup_ttl`) that leaves before its
-- window ends leaves a tombstone instead, `sd:T:k:<queue number>:<key>` →
-- its id, a string that Redis itself expires when the window ends. So no
-- key ever needs a scan, and the keys of a slot live in the slot.

-- The index field of `key` in the queue numbered `qn`.
local function key_field(qn, key)
  return qn .. ':' .. key
end

-- After job `id` (record `rec`: raw, or decoded) left the slot: its key,
-- if it has one and the key still names it, no longer does. With `tomb`
-- (the job is gone for good, not moved to another shard), a window still
-- open at `now` (read from the clock when nil) is kept as a tombstone. `slot_key` is any key of the slot.
local function unkey(slot_key, id, rec, tomb, now)
  if type(rec) == 'string' then
    if string.byte(rec, 1) < KEYED then return end
    rec = decode(rec)
  end
  if not rec.key or rec.key == '' then return end
  local prefix = string.sub(slot_key, 1, -2)
  local field = key_field(rec.qn, rec.key)
  if redis.call('HGET', prefix .. 'k', field) ~= id then return end
  redis.call('HDEL', prefix .. 'k', field)
  if tomb and rec.keyend > 0 then
    now = now or now_ms()
    if rec.keyend > now then
      redis.call('SET', prefix .. 'k:' .. field, id, 'PX', rec.keyend - now)
    end
  end
end

-- What a publish with `key` in the queue numbered `qn` finds at `now`:
-- the id of the job the key names (live, and its window open), with that
-- job's decoded record; or a tombstone's id, without a record; or nil
-- when the key is free. `prefix` is the slot's key prefix.
local function key_find(prefix, jkey, qn, key, now)
  local field = key_field(qn, key)
  local id = redis.call('HGET', prefix .. 'k', field)
  if id then
    local raw = redis.call('HGET', jkey, id)
    if raw then
      local r = decode(raw)
      if not expired(r, now) and (r.keyend == 0 or r.keyend > now) then return id, r end
    end
  end
  local tomb = redis.call('GET', prefix .. 'k:' .. field)
  if tomb then return tomb, nil end
  return nil
end
