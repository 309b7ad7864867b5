-- Records that a pump process is alive on this shard, and reads which
-- processes are (the membership that every process ranks slots over).
-- KEYS[1]: the shard's pump membership zset (member = owner, score = expiry ms)
-- ARGV[1]: owner   ARGV[2]: how long the heartbeat lasts (ms); 0 = leave
--          (the process stops: it is removed at once)
-- Returns: {rejoined, live owners}: rejoined is 1 when this owner was not
-- live before this heartbeat (its first, or one after it lapsed: the leases
-- it thinks it holds may have passed); the live owners include this one
-- unless it left.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local rejoined = 0
if ttl > 0 then
  rejoined = redis.call('ZADD', KEYS[1], now + ttl, owner)
else
  redis.call('ZREM', KEYS[1], owner)
end
return { rejoined, redis.call('ZRANGE', KEYS[1], 0, -1) }
