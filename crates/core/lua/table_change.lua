-- Changes one field of an admin table (tokens, limits, homes, quotas, …) and, only when
-- something changed, bumps the tables' version, so that gateways reload
-- their copy for real changes only.
-- KEYS[1]: the table hash   KEYS[2]: the version counter
-- ARGV[1]: 'add' (only if absent), 'set', 'xset' (only if present), 'del',
--          'cas' (set, only if the field holds ARGV[4], or is absent when ARGV[4] is ''),
--          or 'cad' (delete, only if the field holds ARGV[4])
-- ARGV[2]: field   ARGV[3]: value   ARGV[4]: (cas, cad) the value expected
-- Returns: 1 when the table changed, else 0.
local changed
if ARGV[1] == 'add' then
  changed = redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])
elseif ARGV[1] == 'cas' then
  local was = redis.call('HGET', KEYS[1], ARGV[2]) or ''
  if was ~= (ARGV[4] or '') then return 0 end
  changed = was ~= ARGV[3] and 1 or 0
  if changed == 1 then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
elseif ARGV[1] == 'cad' then
  if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[4] then return 0 end
  changed = redis.call('HDEL', KEYS[1], ARGV[2])
elseif ARGV[1] == 'set' or ARGV[1] == 'xset' then
  local was = redis.call('HGET', KEYS[1], ARGV[2])
  if ARGV[1] == 'xset' and not was then return 0 end
  changed = was ~= ARGV[3] and 1 or 0
  if changed == 1 then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
else
  changed = redis.call('HDEL', KEYS[1], ARGV[2])
end
if changed > 0 then redis.call('INCR', KEYS[2]) end
return changed
