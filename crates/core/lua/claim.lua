-- Takes or gives up one slot's pump lease. A lease is the owner's id, with
-- no expiry. The caller takes a slot it ranks first for among the live
-- processes it knows (rendezvous hashing over the heartbeats), whoever holds
-- it: a holder that is dead, that ranks lower, or that does not know it
-- holds the lease (a lost reply, a failover that restored an old value)
-- cannot keep a slot from being pumped. Two processes whose views of the
-- live set differ may take a slot from each other until their next
-- heartbeats agree (within a round); the pump script checks the lease
-- (fencing), so only the holder of the moment moves anything.
-- KEYS[1]: the slot's lease
-- ARGV[1]: owner   ARGV[2]: 'take' or 'give'
-- ARGV[3]: for 'give', the process to hand the lease to if ours ("" = delete it)
-- Returns: for 'take', 1 when the lease was already the caller's, 2 when
-- the caller took it (from nobody or from another process); for 'give', 0.
local owner, op = ARGV[1], ARGV[2]
local holder = redis.call('GET', KEYS[1])
if op == 'give' then
  if holder == owner then
    if ARGV[3] and ARGV[3] ~= '' then
      redis.call('SET', KEYS[1], ARGV[3])
    else
      redis.call('DEL', KEYS[1])
    end
  end
  return 0
end
if holder == owner then return 1 end
redis.call('SET', KEYS[1], owner)
return 2
