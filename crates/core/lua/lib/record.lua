-- The shared helpers, part 1 of 4: the job record and the queue table.
-- `lua/lib/record.lua`, `counts.lua`, `slot.lua` and `transit.lua`, in that
-- order, are prepended to every script at build time (see src/scripts.rs),
-- so each part may use what the parts before it define.
-- Every script works on the keys of one slot (hash tag `{<slot>}`).
--
-- Job record (one field of the slot's jobs hash, value packed with `struct`):
--   state   B   1 delayed, 2 ready, 3 reserved, 4 dead; plus 16 once the
--               job has been delivered (so the first delivery is known);
--               plus 32 on a job that died, whose `due` then holds when
--               it died (`patch_dead`; jobs dead before this lack it)
--   tries   H   deliveries left
--   pub     I6  publish time, ms, shard clock
--   expire  I6  expiry time, ms, shard clock; 0 = never
--   due     I6  when a delayed job is due, ms; on a ready job, when it
--               became ready after a delay, a retry or a respawn (0 for
--               one published ready: `ready_since`); on a job that died
--               (flag 32), when it died
--   queue   I3  the queue's number in the slot's queue table (`sd:T:q`:
--               `<ns>/<queue>` → number, `#<number>` → `<ns>/<queue>`);
--               a number costs 3 bytes where the name cost its length
--               (a record's size decides its Redis allocation class)
--   attrs   Hc0 attributes as JSON text, "" when none
--   body    the rest of the value
-- State and tries lead the record, so a state change rewrites those three
-- bytes in front of the stored value (`patch`) without unpacking the rest.
local DELAYED, READY, RESERVED, DEAD = 1, 2, 3, 4
-- Counter field prefix per state, in the slot's counters hash.
local COUNTER = { 'l', 'r', 'f', 'd' }
local HEADER = '>BHI6I6I6I3Hc0'
-- The timer wheel: a delayed job due at least NEAR_MS from now waits in the
-- list of its SECOND_MS-wide wheel second (compact), not in the timer zset;
-- the pump moves a second's jobs into the zset SECOND_MS before the second
-- starts.
local SECOND_MS, NEAR_MS = 1000, 2000

-- Announces `message` on `channel`: a sharded channel (`SPUBLISH`, heard
-- only on the node that serves the slot) when the channel carries a hash tag,
-- as it does on a Redis Cluster shard (its slot's `{<slot>}`), else a
-- classic channel (`PUBLISH`), as on a standalone or Sentinel shard, whose
-- Redis may predate sharded pub/sub (7.0). See `src/keys.rs`.
local function announce(channel, message)
  if string.find(channel, '{', 1, true) then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The record `raw` with a new state and tries, the rest unchanged.
-- (`r.queue`, the qualified name, is not stored: scripts set it from the
-- queue they were given, or from the queue table, after `decode`.)
local function patch(raw, state, tries, delivered)
  if delivered then state = state + 16 end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4)
end

local function encode(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  if r.died then state = state + 32 end
  return struct.pack(HEADER, state, r.tries, r.pub, r.expire, r.due or 0, r.qn, #r.attrs, r.attrs)
    .. r.body
end

local function decode(s)
  local state, tries, pub, expire, due, qn, attrs, pos = struct.unpack(HEADER, s)
  return { state = state % 16, delivered = state % 32 >= 16, died = state >= 32, tries = tries, pub = pub,
           expire = expire, due = due, qn = qn, attrs = attrs, body = string.sub(s, pos) }
end

-- The record `raw` of a reservation whose TTR ran out, made ready at
-- `now` with `tries` left: `now` goes in its due field (`ready_since`).
local function patch_retry(raw, tries, delivered, now)
  local state = READY
  if delivered then state = state + 16 end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- When ready job `r` became ready: its publication, or later its due
-- time, retry or respawn (each writes the due field).
local function ready_since(r)
  return math.max(r.pub, r.due)
end

-- The leading fields of a record, without unpacking its attributes and
-- body (no string is made): state (without the delivered flag), queue
-- number, tries, expiry, whether it has been delivered, and due time.
local function head(raw)
  local state, tries, _, expire, due, qn = struct.unpack('>BHI6I6I6I3', raw)
  return state % 16, qn, tries, expire, state % 32 >= 16, due
end

-- The record `raw` of a job that dies at `now` with `tries` left: state
-- DEAD, delivered, and the died flag (32), with `now` in its due field
-- (a dead job has no due time; the dead-letter listing shows when it
-- died). Records of jobs that died before this flag existed lack it.
local function patch_dead(raw, tries, now)
  return struct.pack('>BH', DEAD + 16 + 32, tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- A function that packs records of jobs that share everything but their
-- attributes and body (the jobs of one publication): the fixed fields are
-- packed once, and each record costs one concatenation.
local function packer(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  local fixed = struct.pack('>BHI6I6I6I3', state, r.tries, r.pub, r.expire, r.due or 0, r.qn)
  local bare = fixed .. struct.pack('>H', 0)
  return function(attrs, body)
    if attrs == '' then return bare .. body end
    return fixed .. struct.pack('>H', #attrs) .. attrs .. body
  end
end

-- The slot's queue table (`qkey`): the number of a qualified queue, or nil
-- when the slot never held a job of it.
local function qn_of(qkey, name)
  local n = redis.call('HGET', qkey, name)
  if n then return tonumber(n) end
  return nil
end

-- The number of a qualified queue, given one if it has none yet.
local function qn_make(qkey, name)
  local n = qn_of(qkey, name)
  if n then return n end
  n = redis.call('HINCRBY', qkey, '#', 1)
  redis.call('HSET', qkey, name, n, '#' .. n, name)
  return n
end

-- A function from queue number to qualified name, reading the table once
-- per number.
local function qnames(qkey)
  local cache = {}
  return function(n)
    local name = cache[n]
    if not name then
      name = redis.call('HGET', qkey, '#' .. n) or ''
      cache[n] = name
    end
    return name
  end
end

local function expired(r, now)
  return r.expire > 0 and r.expire <= now
end
