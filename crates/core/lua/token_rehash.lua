-- Rewrites a token stored in plaintext as its digest, with its rate limit,
-- in one step: a token revoked meanwhile stays revoked (nothing is written
-- unless the plaintext field is still there), and the token never goes
-- without its limit.
-- KEYS[1]: the token table   KEYS[2]: the limit table   KEYS[3]: the version
-- ARGV[1]: the plaintext field   ARGV[2]: the hashed field
-- ARGV[3]: the hashed field's value (JSON)
-- Returns: 1 when it rewrote the token, 0 when the plaintext field was gone.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])
local limit = redis.call('HGET', KEYS[2], ARGV[1])
if limit then
  redis.call('HSETNX', KEYS[2], ARGV[2], limit)
  redis.call('HDEL', KEYS[2], ARGV[1])
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[3])
return 1
