-- The shared helpers, part 6 of 7: entries of jobs in transit to another
-- shard (the mover). See `record.lua`.

-- Jobs on their way to another shard (the mover: `src/engine/mover.rs`)
-- wait in the slot's transit hash (`sd:T:m`), out of every list, timer and
-- count, until their copy there is safe. An entry is packed as: the job's
-- timer deadline while reserved (`I6`, ms, this shard's clock; 0 in other
-- states), the take's tag (`I7`, the time of the take in µs: it tells this
-- take's copy from an earlier one's, see `move_in.lua`), its qualified
-- queue (`Hc0`), the destination (`Hc0`: a shard's name, or `@<pool>`),
-- then the job's record as it was. A job deleted (acked) while in transit
-- leaves `x`, its queue (`Hc0`) and the destination in its place, so that
-- the mover deletes the copy it may have made there.
local function transit_pack(deadline, tag, queue, dest, raw)
  return struct.pack('>I6I7H', deadline, tag, #queue) .. queue .. struct.pack('>H', #dest) .. dest .. raw
end

-- The mark that a job deleted in transit leaves (see above).
local function transit_acked(e)
  return 'x' .. struct.pack('>H', #e.queue) .. e.queue .. e.dest
end

-- The time of a take, in µs: `transit_pack`'s tag.
local function transit_tag()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An entry of the transit hash, unpacked ({deadline, tag, queue, dest,
-- raw}), or nil for the mark of a job deleted in transit.
local function transit_unpack(v)
  if string.sub(v, 1, 1) == 'x' then return nil end
  local deadline, tag, qlen, pos = struct.unpack('>I6I7H', v)
  local queue = string.sub(v, pos, pos + qlen - 1)
  local dlen, at = struct.unpack('>H', v, pos + qlen)
  return { deadline = deadline, tag = tag, queue = queue, dest = string.sub(v, at, at + dlen - 1),
           raw = string.sub(v, at + dlen) }
end
