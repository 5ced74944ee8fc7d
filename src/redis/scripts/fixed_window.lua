-- Fixed window counter: a transliteration of `FixedWindow::decide` in
-- src/algorithm/fixed_window.rs.
--
-- KEYS[1]  a hash: w = the window index, n = what it admitted (n > 0);
--          missing = never seen
-- ARGV[1]  now in ticks, or -1: the server's TIME in microseconds
-- ARGV[2]  cost, at most the limit
-- ARGV[3]  limit: requests per window, at least 1; also the capacity
-- ARGV[4]  period: the window length in ticks, 1 to 2^53 - 1
-- ARGV[5]  ticks per millisecond, for the TTL, at least 1
-- Returns {allowed, limit, remaining, reset_after, retry_after, delay}.
--
-- Window n is [n x period, (n + 1) x period). Redis keeps the real window
-- index, so the in-memory limiter's truncated tag has no counterpart here:
-- the two agree wherever that tag decodes exactly, which covers every time
-- below 2^53 ticks. A request whose window would end at 2^53 ticks or later
-- is refused with an error reply, so every value is a whole number below
-- 2^53. An admission of non-zero cost stores the window and its count with a
-- TTL until the window ends (the state is idle from then on); a denial or a
-- cost of 0 writes nothing.

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
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local ticks_per_ms = tonumber(ARGV[5])

-- `ticks` in whole milliseconds, rounded up, at least 1.
local function ttl_ms(ticks)
  local ms = floordiv(ticks, ticks_per_ms)
  if ms * ticks_per_ms < ticks then
    ms = ms + 1
  end
  return math.max(ms, 1)
end

if cost > limit then
  return redis.error_reply('ERR cost exceeds capacity')
end
if now < 0 or now >= EXACT then
  return redis.error_reply('ERR now out of range')
end

local current = floordiv(now, period)
local window, used = current, 0
local stored = redis.call('HMGET', KEYS[1], 'w', 'n')
local count = tonumber(stored[2] or 0)
if count > 0 then
  local w = tonumber(stored[1])
  -- A later window starts afresh; the same window, or a clock that stepped
  -- back, stays in the stored window.
  if w >= current then
    window, used = w, count
  end
end
-- The window must end below 2^53: a product past it rounds to 2^53 or more.
local window_end = (window + 1) * period
if window_end >= EXACT then
  return redis.error_reply('ERR now out of range (windows must end below 2^53 ticks)')
end
-- window >= now / period: the window ends after now.
local until_end = window_end - now
local after = used + cost
-- Cost 0 is a probe: admitted even over a lowered limit.
if after <= limit or cost == 0 then
  local reset_after = 0
  if after > 0 then
    reset_after = until_end
  end
  if cost > 0 then
    redis.call('HSET', KEYS[1], 'w', window, 'n', after)
    -- Idle once the window ends.
    redis.call('PEXPIRE', KEYS[1], ttl_ms(until_end))
  end
  return {1, limit, math.max(limit - after, 0), reset_after, 0, 0}
end
-- cost <= limit, so a denial means used > 0: the window ends the state, and
-- the next window admits any allowed cost.
return {0, limit, limit - used, until_end, until_end, 0}
