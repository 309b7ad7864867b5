-- Lets transit entries go once their copies are safe (`move_out.lua`), and
-- removes copy marks once no entry is left to copy again (`move_in.lua`).
-- A job counts in the slot's usage here until its transit entry goes.
-- KEYS[1]: transit hash (`done`, `forget`), or copy marks (`unmark`)
-- ARGV[1]: `done` (entries of jobs still in transit go; the marks of jobs
--          deleted in transit stay, and are returned), `forget` (the given
--          entries go, whatever they hold) or `unmark` (the copy marks go
--          that a take of the given tag left: a later take's mark stays)
-- ARGV[2..]: job ids (`unmark`: per job, id and tag)
-- Returns, for `done`, how many entries went, then per job deleted in transit:
-- its id and mark.
local out = {}
-- The usage of the jobs whose entries `ids` (values `values`) go.
local function unuse(ids, values)
  local t = tally()
  for x = 1, #ids do
    local e = values[x] and transit_unpack(values[x])
    if e then t.use(e.queue, -1, -job_bytes(ids[x], e.raw)) end
  end
  t.flush(KEYS[1])
end
if ARGV[1] == 'forget' then
  local ids = {}
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
  unuse(ids, hmget_many(KEYS[1], ids))
  call_many('HDEL', KEYS[1], ids, 1)
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
local gone, gone_values = {}, {}
for x = 1, #ids do
  local v = values[x]
  if v then
    if string.sub(v, 1, 1) == 'x' then
      out[#out + 1] = ids[x]
      out[#out + 1] = v
    else
      gone[#gone + 1] = ids[x]
      gone_values[#gone_values + 1] = v
    end
  end
end
unuse(gone, gone_values)
call_many('HDEL', KEYS[1], gone, 1)
out[1] = #gone
return out
