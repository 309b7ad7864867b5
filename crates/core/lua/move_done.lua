-- Lets transit entries go once their copies are safe (`move_out.lua`), and
-- removes copy marks once no entry is left to copy again (`move_in.lua`).
-- KEYS[1]: transit hash (`done`, `forget`), or copy marks (`unmark`)
-- ARGV[1]: `done` (entries of jobs still in transit go; the marks of jobs
--          deleted in transit stay, and are returned), `forget` (the given
--          entries go, whatever they hold) or `unmark` (the copy marks go
--          that a take of the given tag left: a later take's mark stays)
-- ARGV[2..]: job ids (`unmark`: per job, id and tag)
-- Returns, for `done`, how many entries went, then per job deleted in transit:
-- its id and mark.
local out = {}
if ARGV[1] == 'forget' then
  for i = 2, #ARGV, 1000 do
    redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  return out
end
if ARGV[1] == 'unmark' then
  local ids, tags = {}, {}
  for i = 2, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
    tags[#tags + 1] = tonumber(ARGV[i + 1])
  end
  local gone = {}
  for x = 1, #ids, 1000 do
    local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids, x, math.min(x + 999, #ids)))
    for y = 1, #scores do
      if scores[y] and tonumber(scores[y]) == tags[x + y - 1] then gone[#gone + 1] = ids[x + y - 1] end
    end
  end
  call_many('ZREM', KEYS[1], gone, 1)
  return out
end
out[1] = 0
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local values = hmget_many(KEYS[1], ids)
local gone = {}
for x = 1, #ids do
  local v = values[x]
  if v then
    if string.sub(v, 1, 1) == 'x' then
      out[#out + 1] = ids[x]
      out[#out + 1] = v
    else
      gone[#gone + 1] = ids[x]
    end
  end
end
call_many('HDEL', KEYS[1], gone, 1)
out[1] = #gone
return out
