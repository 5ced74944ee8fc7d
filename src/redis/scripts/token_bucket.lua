-- Token bucket as GCRA (ITU-T I.371): a transliteration of
-- `TokenBucket::decide` in src/algorithm/token_bucket.rs.
--
-- KEYS[1]  the theoretical arrival time (TAT) in ticks; missing = 0, never seen
-- ARGV[1]  now in ticks, or -1: the server's TIME in microseconds
-- ARGV[2]  cost, at most the capacity
-- ARGV[3]  interval: ticks per token, at least 1
-- ARGV[4]  capacity: tokens when full, at least 1
-- ARGV[5]  tau = capacity x interval, below 2^53
-- ARGV[6]  ticks per millisecond, for the TTL, at least 1
-- Returns {allowed, limit, remaining, reset_after, retry_after, delay}.
--
-- Every value is a whole number below 2^53: a request whose base,
-- max(TAT, now), is 2^53 - tau or more is refused with an error reply, so a
-- stored TAT is below 2^53 and any `now` below 2^53 - 2 x tau is served.
-- An admission (cost 0 included, as in memory) stores max(TAT, now) +
-- cost x interval with a TTL of the time until the bucket is full again
-- (a TAT <= now is idle); a denial writes nothing.

local EXACT = 9007199254740992 -- 2^53

-- floor(a / b), exact for whole numbers 0 <= a < 2^53 and 1 <= b < 2^53:
-- the double quotient may be one off; the products that correct it are exact
-- or, past 2^53, still compare correctly with a.
local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local now = tonumber(ARGV[1])
if now == -1 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local capacity = tonumber(ARGV[4])
local tau = tonumber(ARGV[5])
local ticks_per_ms = tonumber(ARGV[6])

-- `ticks` in whole milliseconds, rounded up, at least 1.
local function ttl_ms(ticks)
  local ms = floordiv(ticks, ticks_per_ms)
  if ms * ticks_per_ms < ticks then
    ms = ms + 1
  end
  return math.max(ms, 1)
end

if cost > capacity then
  return redis.error_reply('ERR cost exceeds capacity')
end
if now < 0 then
  return redis.error_reply('ERR now out of range')
end

local tat = tonumber(redis.call('GET', KEYS[1]) or 0)
-- A TAT in the past means a full bucket: start from now. A `now` that went
-- backwards leaves base = tat: no time elapsed.
local base = math.max(tat, now)
if base >= EXACT - tau then
  return redis.error_reply('ERR now out of range (below 2^53 - tau ticks)')
end
-- base + cost x interval <= max(tat, now) + tau < 2^53.
local new_tat = base + cost * interval
local ahead = new_tat - now
-- Cost 0 is a probe, as in memory: admitted whatever the state (even after
-- a step back put `ahead` past tau), and nothing is written.
if ahead <= tau or cost == 0 then
  local remaining = floordiv(math.max(tau - ahead, 0), interval)
  if cost > 0 then
    -- Idle (full again) once now reaches the new TAT, `ahead` ticks on.
    redis.call('SET', KEYS[1], new_tat, 'PX', ttl_ms(ahead))
  end
  return {1, capacity, remaining, ahead, 0, 0}
end
local used = base - now
local remaining = floordiv(math.max(tau - used, 0), interval)
return {0, capacity, remaining, used, ahead - tau, 0}
