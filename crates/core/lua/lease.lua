-- Keeps one pump process's bucket leases on this shard, in one call, and
-- records that the process is alive.
-- KEYS[1]: the shard's pump membership zset (member = owner, score = expiry ms)
-- KEYS[2..]: lease keys, one per bucket
-- ARGV[1]: owner   ARGV[2]: lease ttl ms
-- ARGV[3]: membership ttl ms (shorter than the lease's, so that others stop
--          counting a dead process before its leases expire, and take them
--          as soon as they do)
-- ARGV[4..]: one op per lease key:
--   'a' acquire or renew (take it if free, renew it if ours)
--   'r' release it if ours (compare-and-delete)
-- Returns: {held flags (1/0, one per lease key)..., then the live owners}
-- as two arrays: {{flags}, {owners}}.
local owner, ttl, member_ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
redis.call('ZADD', KEYS[1], now + member_ttl, owner)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local flags = {}
for i = 2, #KEYS do
  local op, key = ARGV[i + 2], KEYS[i]
  local holder = redis.call('GET', key)
  local held = 0
  if op == 'r' then
    if holder == owner then redis.call('DEL', key) end
  elseif holder == owner then
    redis.call('PEXPIRE', key, ttl)
    held = 1
  elseif not holder then
    redis.call('SET', key, owner, 'PX', ttl)
    held = 1
  end
  flags[#flags + 1] = held
end
return { flags, redis.call('ZRANGE', KEYS[1], 0, -1) }
