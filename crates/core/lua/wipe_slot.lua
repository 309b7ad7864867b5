-- Removes what one slot of a shard that left its pool keeps: the wheel
-- lists and expiry hashes its wheel index names (ids of delayed jobs, and
-- expiries of ready and dead jobs, deleted before their second), the ready and dead lists of the queues its table names (ids left
-- behind by deletions the lists were not searched for), and the slot's own
-- keys. Refuses, removing nothing, while the slot holds a job record, a
-- timer entry (a job that arrived since the caller's checks) or a
-- schedule (which the mover had not moved).
-- KEYS: jobs, timer, wheel index, counters, queues, lease, transit, copy
-- marks, mover lease, schedules, fire states, fire zset, guard.
-- ARGV: the slot's key prefix.
-- Returns the keys removed, or -1 when refused.
if redis.call('HLEN', KEYS[1]) > 0 or redis.call('ZCARD', KEYS[2]) > 0
    or redis.call('HLEN', KEYS[7]) > 0 or redis.call('HLEN', KEYS[10]) > 0 then
  return -1
end
local prefix = ARGV[1]
local removed = 0
for _, second in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  removed = removed + redis.call('DEL', prefix .. 'w:' .. second, prefix .. 'e:' .. second)
end
for _, field in ipairs(redis.call('HKEYS', KEYS[5])) do
  -- `<ns>/<queue>` names a queue; `#…` fields number them.
  if string.sub(field, 1, 1) ~= '#' then
    for _, lkey in ipairs(ready_lists(prefix .. 'r:' .. field)) do
      removed = removed + redis.call('DEL', lkey)
    end
    removed = removed + redis.call('DEL', levels_key(prefix .. 'r:' .. field), prefix .. 'd:' .. field)
  end
end
-- The key index holds entries only of jobs the slot holds: none is left.
return removed + redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8], KEYS[9], KEYS[11], KEYS[12],
  usage_key(KEYS[4]),
  prefix .. 'k')
