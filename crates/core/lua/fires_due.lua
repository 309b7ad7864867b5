-- The schedules of one slot whose next planned fire is due (read only):
-- what a pump counts, per namespace, before it admits the fires of those
-- held to a backlog quota (`fire.lua` then fires them).
-- KEYS[1]: the slot's fire zset   ARGV[1]: the most members
-- Returns the members, by due time.
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
