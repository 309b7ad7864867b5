-- Counts one request against a fixed-window rate limit, or refunds one.
-- KEYS[1]: the counter of one token and action
-- ARGV[1]: window length ms   ARGV[2]: 1 to count, -1 to refund
-- Returns: {the count in the current window after this call, ms until
-- the window ends}.
if tonumber(ARGV[2]) < 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
  return {redis.call('DECR', KEYS[1]), redis.call('PTTL', KEYS[1])}
end
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('PTTL', KEYS[1])}
