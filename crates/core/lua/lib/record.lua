-- The shared helpers, part 1 of 7: the job record and the queue table.
-- `lua/lib/record.lua`, `counts.lua`, `keys.lua`, `expiry.lua`, `slot.lua`,
-- `transit.lua` and `fires.lua`, in that order, are prepended to every script at build
-- time (see src/scripts.rs), so each part may use what the parts before it
-- define.
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
-- A record with flag 64 in its state byte is extended (data format 3):
-- between its queue number and its attributes it holds
--   delivery I4  the job's deliveries so far (its consumes that reached a client); it fences
--                acks, touches and releases (`?delivery=N`)
--   policy   Bc0 its retry policy, packed (`policy.rs`), "" for none
--   reason   Hc0 why it last failed (a release's reason, "ttr expired"),
--                "" when it never failed; at most 1 KiB
-- A record with flag 128 (keyed, always extended too: data format 4)
-- holds, between its reason and its attributes, the idempotency key it
-- was published with:
--   keyend   I6  when the key's window ends (ms; 0: the key lasts as long
--                as the job)
--   key      Hc0 the key (1 to 256 bytes)
-- The slot's key index (`sd:T:k`) points the key at the job while the job
-- lives (`lua/lib/keys.lua`).
-- A record with flag 8 (a priority above 0: data format 5) holds, right
-- before its attributes (after its extension and key, if any), its
--   priority B   1 to 255; a record without the flag has priority 0
-- Its place keeps the extension's offsets (bytes 25 on) the same with it
-- or without it; the slot keeps one ready list per priority in use
-- (`ready_list` in `lua/lib/slot.lua`).
-- A record becomes extended at its first delivery (`deliver`), or at its
-- publish when it carries a policy; jobs that are never delivered keep
-- the plain record, 7 bytes shorter. A plain record reads as delivery 0,
-- or 1 when its delivered flag is set (a job delivered before format 3).
-- State and tries lead the record, so a state change rewrites those three
-- bytes in front of the stored value (`patch`) without unpacking the rest;
-- every patch keeps flag 64.
local DELAYED, READY, RESERVED, DEAD = 1, 2, 3, 4
local PRIORITIZED, EXTENDED, KEYED = 8, 64, 128
-- Counter field prefix per state, in the slot's counters hash.
local COUNTER = { 'l', 'r', 'f', 'd' }
local HEADER = '>BHI6I6I6I3Hc0'
local EXT_HEADER = '>BHI6I6I6I3I4Bc0Hc0Hc0'
local KEYED_HEADER = '>BHI6I6I6I3I4Bc0Hc0I6Hc0Hc0'
-- The bytes an extended record has beyond a plain one, without its
-- policy and reason: delivery I4, policy length B, reason length H.
local EXT_BYTES = 7
-- The timer wheel: a delayed job due at least NEAR_MS from now waits in the
-- list of its SECOND_MS-wide wheel second (compact), not in the timer zset,
-- and a ready or dead job's expiry that far ahead in the expiry hash of its
-- second (`expiries` in `expiry.lua`); the pump moves a second's jobs and
-- expiries into the zset SECOND_MS before the second starts.
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

-- Flags 8, 64 and 128 of record `raw`, to keep on a rewrite of its state
-- byte.
local function ext_flag(raw)
  local b = string.byte(raw, 1)
  local f = 0
  if b >= KEYED then f = KEYED end
  if b % 128 >= EXTENDED then f = f + EXTENDED end
  if b % 16 >= PRIORITIZED then f = f + PRIORITIZED end
  return f
end

-- Where the priority byte of record `raw` is (flag 8): after the fixed
-- fields, the extension and the key.
local function priority_at(raw)
  local b = string.byte(raw, 1)
  local at = 25
  if b % 128 >= EXTENDED then
    at = 30 + string.byte(raw, 29)
    at = at + 2 + struct.unpack('>H', raw, at)
  end
  if b >= KEYED then at = at + 8 + struct.unpack('>H', raw, at + 6) end
  return at
end

-- The priority of record `raw` (0 to 255), read without unpacking it.
local function priority_of(raw)
  if string.byte(raw, 1) % 16 < PRIORITIZED then return 0 end
  return string.byte(raw, priority_at(raw))
end

-- Record `raw` without its priority byte, and that priority: what the
-- fixed formats below unpack (flag 8 stays set in the state byte).
local function unprioritized(raw)
  if string.byte(raw, 1) % 16 < PRIORITIZED then return raw, 0 end
  local at = priority_at(raw)
  return string.sub(raw, 1, at - 1) .. string.sub(raw, at + 1), string.byte(raw, at)
end

-- Record `packed` (encoded without a priority) with priority `p`.
local function prioritized(packed, p)
  if p == nil or p == 0 then return packed end
  local at = priority_at(packed)
  return string.char(string.byte(packed, 1) + PRIORITIZED) .. string.sub(packed, 2, at - 1)
    .. string.char(p) .. string.sub(packed, at)
end

-- The record `raw` with a new state and tries, the rest unchanged.
-- (`r.queue`, the qualified name, is not stored: scripts set it from the
-- queue they were given, or from the queue table, after `decode`.)
local function patch(raw, state, tries, delivered)
  if delivered then state = state + 16 end
  state = state + ext_flag(raw)
  -- '>BH' by hand: a third of the time struct.pack takes.
  return string.char(state, math.floor(tries / 256), tries % 256) .. string.sub(raw, 4)
end

-- Packs a decoded record: extended when `r.ext` is set (a decoded
-- record keeps its form, so `encode(decode(raw))` is `raw`; a script that
-- sets a delivery, policy or reason sets `ext`, and counts the bytes
-- this adds: `job_bytes`).
local encode_plain
local function encode(r)
  return prioritized(encode_plain(r), r.priority)
end

encode_plain = function(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  if r.died then state = state + 32 end
  if r.key and r.key ~= '' then
    return struct.pack(KEYED_HEADER, state + EXTENDED + KEYED, r.tries, r.pub, r.expire, r.due or 0, r.qn,
      r.delivery or 0, #(r.policy or ''), r.policy or '', #(r.reason or ''), r.reason or '',
      r.keyend or 0, #r.key, r.key, #r.attrs, r.attrs) .. r.body
  end
  if r.ext then
    return struct.pack(EXT_HEADER, state + EXTENDED, r.tries, r.pub, r.expire, r.due or 0, r.qn,
      r.delivery or 0, #(r.policy or ''), r.policy or '', #(r.reason or ''), r.reason or '',
      #r.attrs, r.attrs) .. r.body
  end
  return struct.pack(HEADER, state, r.tries, r.pub, r.expire, r.due or 0, r.qn, #r.attrs, r.attrs)
    .. r.body
end

local function decode(s)
  local r
  local priority
  s, priority = unprioritized(s)
  if string.byte(s, 1) >= KEYED then
    local state, tries, pub, expire, due, qn, delivery, policy, reason, keyend, key, attrs, pos =
      struct.unpack(KEYED_HEADER, s)
    r = { state = state % 128, tries = tries, pub = pub, expire = expire, due = due, qn = qn, ext = true,
          delivery = delivery, policy = policy, reason = reason, keyend = keyend, key = key,
          attrs = attrs, body = string.sub(s, pos) }
  elseif string.byte(s, 1) % 128 >= EXTENDED then
    local state, tries, pub, expire, due, qn, delivery, policy, reason, attrs, pos =
      struct.unpack(EXT_HEADER, s)
    r = { state = state, tries = tries, pub = pub, expire = expire, due = due, qn = qn, ext = true,
          delivery = delivery, policy = policy, reason = reason, keyend = 0, key = '', attrs = attrs,
          body = string.sub(s, pos) }
  else
    local state, tries, pub, expire, due, qn, attrs, pos = struct.unpack(HEADER, s)
    r = { state = state, tries = tries, pub = pub, expire = expire, due = due, qn = qn, ext = false,
          delivery = 0, policy = '', reason = '', keyend = 0, key = '', attrs = attrs,
          body = string.sub(s, pos) }
    if state % 32 >= 16 then r.delivery = 1 end
  end
  local state = r.state
  r.state, r.delivered, r.died = state % 8, state % 32 >= 16, state % 64 >= 32
  r.priority = priority
  return r
end

-- Where the body of record `raw` starts (the byte after its attributes),
-- and its attributes' length, without copying the body.
local function body_at(raw)
  if string.byte(raw, 1) % 16 >= PRIORITIZED then
    local at = priority_at(raw) + 1
    return at + 2 + struct.unpack('>H', raw, at), struct.unpack('>H', raw, at)
  end
  if string.byte(raw, 1) >= KEYED then
    local _, _, _, _, _, _, _, _, _, _, _, attrs, pos = struct.unpack(KEYED_HEADER, raw)
    return pos, #attrs
  end
  if string.byte(raw, 1) % 128 >= EXTENDED then
    local _, _, _, _, _, _, _, _, _, attrs, pos = struct.unpack(EXT_HEADER, raw)
    return pos, #attrs
  end
  local _, _, _, _, _, _, attrs, pos = struct.unpack(HEADER, raw)
  return pos, #attrs
end

-- The deliveries so far of the job of record `raw` (see the layout).
local function delivery_of(raw)
  local b = string.byte(raw, 1)
  if b % 128 >= EXTENDED then return (struct.unpack('>I4', raw, 25)) end
  if b % 32 >= 16 then return 1 end
  return 0
end

-- Record `raw` delivered once more: reserved, `tries` left, delivered,
-- extended, its delivery count one higher. Returns the record and the
-- bytes it grew by (7 when it was plain, else 0).
local function deliver(raw, tries)
  local state = RESERVED + 16 + EXTENDED
  if string.byte(raw, 1) % 16 >= PRIORITIZED then state = state + PRIORITIZED end
  if string.byte(raw, 1) % 128 >= EXTENDED then
    if string.byte(raw, 1) >= KEYED then state = state + KEYED end
    local n = struct.unpack('>I4', raw, 25)
    return struct.pack('>BH', state, tries) .. string.sub(raw, 4, 24) .. struct.pack('>I4', n + 1)
      .. string.sub(raw, 29), 0
  end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4, 24)
    .. struct.pack('>I4BH', delivery_of(raw) + 1, 0, 0) .. string.sub(raw, 25), EXT_BYTES
end

-- The packed retry policy of record `raw` ("" for none): kind B (0 none,
-- 1 fixed, 2 exponential), initial delay I4 ms, multiplier H (thousandths),
-- largest delay I4 ms, jitter B (percent), retry bound I4 ms after publish
-- (0 none); `sundial_router::policy` packs it.
local function policy_of(raw)
  if string.byte(raw, 1) % 128 < EXTENDED then return '' end
  return string.sub(raw, 30, 29 + string.byte(raw, 29))
end

-- The delay (ms) before the next try of a job whose delivery number
-- `delivery` failed, by its policy `policy`; nil without a backoff (the job
-- is ready again at once, as in lmstfy). Jitter moves it either way by up to
-- its share, at random (seeded from the clock once per call: Redis seeds
-- every script call alike).
local seeded = false
local function retry_delay(policy, delivery)
  if #policy < 16 then return nil end
  local kind, initial, mult, max, jitter = struct.unpack('>BI4HI4B', policy)
  if kind == 0 then return nil end
  local d = initial
  if kind == 2 then
    d = initial * (mult / 1000) ^ math.max(0, delivery - 1)
    if d > max then d = max end
  end
  if jitter > 0 then
    if not seeded then
      math.randomseed(tonumber(redis.call('TIME')[2]))
      seeded = true
    end
    d = d * (1 + jitter / 100 * (2 * math.random() - 1))
  end
  return math.max(0, math.floor(d))
end

-- Whether a job published at `pub` is past its policy's retry bound at
-- `now`: a failure then sends it to the dead letter, tries left or not.
local function past_retry(policy, pub, now)
  if #policy < 16 then return false end
  local bound = struct.unpack('>I4', policy, 13)
  return bound > 0 and now >= pub + bound
end

-- Record `raw` with `reason` as the reason its job last failed: the
-- reason field rewritten (a plain record becomes extended). Its length
-- changes by the difference: the caller counts it (`job_bytes`).
local function with_reason(raw, reason)
  local b = string.byte(raw, 1)
  if b % 128 >= EXTENDED then
    -- Delivery at bytes 25..28, the policy's length at 29, its reason's
    -- length right after the policy.
    local at = 30 + string.byte(raw, 29)
    local old = struct.unpack('>H', raw, at)
    return string.sub(raw, 1, at - 1) .. struct.pack('>H', #reason) .. reason
      .. string.sub(raw, at + 2 + old)
  end
  return string.char(b + EXTENDED) .. string.sub(raw, 2, 24)
    .. struct.pack('>I4BH', delivery_of(raw), 0, #reason) .. reason .. string.sub(raw, 25)
end

-- The record `raw` of a reservation whose TTR ran out, made ready at
-- `now` with `tries` left: `now` goes in its due field (`ready_since`).
local function patch_retry(raw, tries, delivered, now)
  local state = READY + ext_flag(raw)
  if delivered then state = state + 16 end
  return struct.pack('>BH', state, tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- The record `raw` of a reservation whose TTR ran out, delayed by its
-- retry policy until `due` with `tries` left (it has been delivered).
local function patch_delayed(raw, tries, due)
  return struct.pack('>BH', DELAYED + 16 + ext_flag(raw), tries) .. string.sub(raw, 4, 15)
    .. struct.pack('>I6', due) .. string.sub(raw, 22)
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
  return state % 8, qn, tries, expire, state % 32 >= 16, due
end

-- The record `raw` of a job that dies at `now` with `tries` left: state
-- DEAD, delivered, and the died flag (32), with `now` in its due field
-- (a dead job has no due time; the dead-letter listing shows when it
-- died). Records of jobs that died before this flag existed lack it.
local function patch_dead(raw, tries, now)
  return struct.pack('>BH', DEAD + 16 + 32 + ext_flag(raw), tries) .. string.sub(raw, 4, 15) .. struct.pack('>I6', now)
    .. string.sub(raw, 22)
end

-- A function that packs records of jobs that share everything but their
-- attributes and body (the jobs of one publication): the fixed fields are
-- packed once, and each record costs one concatenation.
local function packer(r)
  local state = r.state
  if r.delivered then state = state + 16 end
  local p = r.priority or 0
  if p > 0 then state = state + PRIORITIZED end
  local fixed = struct.pack('>BHI6I6I6I3', state, r.tries, r.pub, r.expire, r.due or 0, r.qn)
  if r.ext then
    fixed = struct.pack('>BHI6I6I6I3I4Bc0Hc0', state + EXTENDED, r.tries, r.pub, r.expire, r.due or 0,
      r.qn, r.delivery, #r.policy, r.policy, #r.reason, r.reason)
  end
  if p > 0 then fixed = fixed .. string.char(p) end
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
