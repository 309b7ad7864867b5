-- A namespace's rate quota (jobs per second), as a GCRA bucket on the
-- shard's clock: the key holds the theoretical arrival time (`tat`, ms)
-- of the next job; a second's worth of jobs may come at once.
-- KEYS[1]: the namespace's bucket for one direction (publish or consume)
-- ARGV[1]: jobs per second (> 0)   ARGV[2]: jobs asked (> 0)
-- ARGV[3]: 'all' (all or none: a publish), 'some' (as many as the bucket
--          holds, up to the jobs asked: a consume), or 'refund' (give back
--          jobs taken and not used)
-- Returns: {jobs granted, when refused the ms until a call would be
-- granted (all the jobs asked for 'all', one for 'some'; else 0), jobs
-- drawn on the bucket after this call}.
local rate, n, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local step = SECOND_MS / rate
local now = now_ms()
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or 0), now)
local drawn = function(t) return math.ceil((t - now) / step - 1e-9) end
local store = function(t)
  if t > now then
    redis.call('SET', KEYS[1], string.format('%.3f', t), 'PX', math.ceil(t - now) + 1)
  else
    redis.call('DEL', KEYS[1])
  end
end
if mode == 'refund' then
  local back = math.max(now, tat - n * step)
  store(back)
  return { 0, 0, drawn(back) }
end
-- A second's worth at once; a publish larger than that only into an
-- empty bucket, so that it is not refused forever.
local burst = SECOND_MS
if mode == 'all' then burst = math.max(SECOND_MS, n * step) end
local room = math.floor((now + burst - tat) / step + 1e-9)
local granted = math.min(n, math.max(room, 0))
if granted == 0 or (mode == 'all' and granted < n) then
  -- When what was asked would fit: all of it for 'all', one job for 'some'.
  local need = n
  if mode == 'some' then need = 1 end
  return { 0, math.ceil(tat + need * step - burst - now), drawn(tat) }
end
tat = tat + granted * step
store(tat)
return { granted, 0, drawn(tat) }
