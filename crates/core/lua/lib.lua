-- Shared helpers, prepended to every script at build time (see src/scripts.rs).
--
-- Job record (one field of the bucket's jobs hash, value packed with `struct`):
--   state   B   1 delayed, 2 ready, 3 reserved, 4 dead
--   tries   H   deliveries left
--   pub     d   publish time, ms, shard clock
--   expire  d   expiry time, ms, shard clock; 0 = never
--   queue   Hc0 queue name
--   attrs   Hc0 attributes as JSON text, "" when none
--   body    the rest of the value
local DELAYED, READY, RESERVED, DEAD = 1, 2, 3, 4
-- Counter field prefix per state, in the bucket's counters hash.
local COUNTER = { 'l', 'r', 'f', 'd' }
local HEADER = '>BHddHc0Hc0'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function encode(r)
  return struct.pack(HEADER, r.state, r.tries, r.pub, r.expire, #r.queue, r.queue, #r.attrs, r.attrs) .. r.body
end

local function decode(s)
  local state, tries, pub, expire, queue, attrs, pos = struct.unpack(HEADER, s)
  return { state = state, tries = tries, pub = pub, expire = expire, queue = queue, attrs = attrs,
           body = string.sub(s, pos) }
end

local function expired(r, now)
  return r.expire > 0 and r.expire <= now
end

local function count(ckey, state, queue, delta)
  redis.call('HINCRBY', ckey, COUNTER[state] .. queue, delta)
end

-- Lowest score of a zset, or nil when it is empty.
local function zmin(zkey)
  local head = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if #head == 0 then return nil end
  return tonumber(head[2])
end

-- Schedules `id` on the bucket's timer at `at`, and tells the pumps when this
-- makes the bucket due sooner than before, so a sleeping pump wakes early.
local function arm(tkey, id, at, timer_channel, bucket_tag)
  local before = zmin(tkey)
  redis.call('ZADD', tkey, at, id)
  if before == nil or at < before then
    redis.call('PUBLISH', timer_channel, bucket_tag)
  end
end

-- The timer entry a job needs in a state that has no due time of its own:
-- its expiry, or none.
local function arm_expiry(tkey, id, r)
  if r.expire > 0 then
    redis.call('ZADD', tkey, r.expire, id)
  else
    redis.call('ZREM', tkey, id)
  end
end

-- Removes a job record and its timer entry; list entries become stale and
-- are skipped by whoever pops them.
local function drop(jkey, tkey, ckey, id, r)
  redis.call('HDEL', jkey, id)
  redis.call('ZREM', tkey, id)
  count(ckey, r.state, r.queue, -1)
end

local function ttl_left(r, now)
  if r.expire == 0 then return 0 end
  return r.expire - now
end

-- The reply shape shared by consume and peek:
-- {queue, id, elapsed_ms, ttl_ms (0 = no expiry), tries, attrs, body, state}
local function view(r, id, now)
  return { r.queue, id, math.max(0, now - r.pub), ttl_left(r, now), r.tries, r.attrs, r.body, r.state }
end

-- Stores a new job: delayed on the timer, or ready at the tail of its queue.
local function put(jkey, tkey, rkey, id, r, due, timer_channel, bucket_tag)
  redis.call('HSET', jkey, id, encode(r))
  if r.state == DELAYED then
    arm(tkey, id, due, timer_channel, bucket_tag)
  else
    redis.call('LPUSH', rkey, id)
    if r.expire > 0 then redis.call('ZADD', tkey, r.expire, id) end
  end
end

-- A fresh record for publish and republish.
local function fresh(queue, delay, ttl, tries, now)
  local r = { tries = tries, pub = now, expire = 0, queue = queue, state = READY }
  if ttl > 0 then r.expire = now + ttl end
  if delay > 0 then r.state = DELAYED end
  return r
end

-- Multi-bucket scripts pass `stride` keys per bucket, bucket after bucket.
local function bucket_keys(b, stride)
  local base = (b - 1) * stride
  local ks = {}
  for i = 1, stride do ks[i] = KEYS[base + i] end
  return ks
end

-- Walks a list from its consuming end (the right), skipping entries whose
-- record is gone or no longer in `state`; returns the first live id and record.
local function first_live(jkey, lkey, state, now, max_scan)
  for i = 1, max_scan do
    local id = redis.call('LINDEX', lkey, -i)
    if not id then return nil end
    local raw = redis.call('HGET', jkey, id)
    if raw then
      local r = decode(raw)
      if r.state == state and not expired(r, now) then return id, r end
    end
  end
  return nil
end
