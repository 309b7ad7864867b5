-- Takes or hands over one slot's pump lease. A lease is the owner's id,
-- with no expiry: it passes when another process finds its holder gone from
-- the live membership (the heartbeats, read by the caller), or when the
-- holder hands it over. The pump script checks it (fencing), so a process
-- that was paused or cut off moves nothing once its lease has passed.
-- KEYS[1]: the slot's lease
-- ARGV[1]: owner   ARGV[2]: 'take' or 'give'
-- ARGV[3..]: for 'take', the live owners as the caller last read them;
--            for 'give', the owner to hand the lease to ("" = nobody)
-- Returns: 1 when the caller holds the lease after the call, else 0.
local owner, op = ARGV[1], ARGV[2]
local holder = redis.call('GET', KEYS[1])
if op == 'give' then
  if holder == owner then
    if ARGV[3] ~= '' then
      redis.call('SET', KEYS[1], ARGV[3])
    else
      redis.call('DEL', KEYS[1])
    end
  end
  return 0
end
if holder == owner then return 1 end
if holder then
  for i = 3, #ARGV do
    if ARGV[i] == holder then return 0 end
  end
end
redis.call('SET', KEYS[1], owner)
return 1
