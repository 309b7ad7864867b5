-- The schedules of one slot whose next planned fire is due, or comes due
-- within ARGV[2] ms (read only): what a pump counts, per namespace, before
-- it admits the fires of those held to a backlog quota (`fire.lua` then
-- fires them; counting a little ahead, the pump admits the fires that come
-- due between this read and that call too).
-- KEYS[1]: the slot's fire zset   ARGV[1]: the most members   ARGV[2]: ms ahead
-- Returns the members, by due time.
local until_ms = now_ms() + tonumber(ARGV[2])
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', until_ms, 'LIMIT', 0, tonumber(ARGV[1]))
