-- Adds a queue to a namespace's queue index (see `engine::queue_index`)
-- unless the index would then hold more queues than the namespace's
-- `max_queues`: the check and the addition in one step, so that
-- gateways publishing at once cannot pass the bound together.
-- KEYS[1]: the namespace's index (sorted set, score 0)
-- ARGV[1]: the queue   ARGV[2]: the bound (0 = none)
-- Returns {1, queues} when the queue is in the index (added, or there
-- already), {0, queues} when refused (nothing changed).
local queue, max = ARGV[1], tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], queue) then
  return { 1, redis.call('ZCARD', KEYS[1]) }
end
local n = redis.call('ZCARD', KEYS[1])
if max > 0 and n >= max then
  return { 0, n }
end
redis.call('ZADD', KEYS[1], 0, queue)
return { 1, n + 1 }
