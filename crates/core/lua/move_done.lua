-- Lets transit entries go once their copies are safe (`move_out.lua`).
-- KEYS[1]: transit hash
-- ARGV[1]: `done` (entries of jobs still in transit go; the marks of jobs
--          deleted in transit stay, and are returned) or `forget` (the
--          given entries go, whatever they hold)
-- ARGV[2..]: job ids
-- Returns, for `done`, per job deleted in transit: its id and queue.
local out = {}
if ARGV[1] == 'forget' then
  for i = 2, #ARGV, 1000 do
    redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  return out
end
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local values = hmget_many(KEYS[1], ids)
local gone = {}
for x = 1, #ids do
  local v = values[x]
  if v then
    if string.sub(v, 1, 1) == 'x' then
      out[#out + 1] = ids[x]
      out[#out + 1] = string.sub(v, 2)
    else
      gone[#gone + 1] = ids[x]
    end
  end
end
call_many('HDEL', KEYS[1], gone, 1)
return out
