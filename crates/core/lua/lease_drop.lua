-- Releases every lease a pump process holds among KEYS[2..] and removes it
-- from the membership (KEYS[1]): its shutdown.
-- ARGV[1]: owner
-- Returns: how many leases were released.
local n = 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
return n
