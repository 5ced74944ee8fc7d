-- Sliding window counter (Cloudflare, 2017): a transliteration of
-- `SlidingWindowCounter::decide` in src/algorithm/sliding_window_counter.rs.
--
-- KEYS[1]  a hash for even windows: w = the window index, n = its count (n > 0)
-- KEYS[2]  the same for odd windows
--          (both hash-tagged into one Cluster slot; missing = nothing counted)
-- ARGV[1]  now in ticks, or -1: the server's TIME in microseconds
-- ARGV[2]  cost, at most the limit
-- ARGV[3]  limit: requests per period, at least 1; also the capacity
-- ARGV[4]  period: the window length in ticks, 1 to 2^53 - 1
-- ARGV[5]  ticks per millisecond, for the TTL, at least 1
-- Returns {allowed, limit, remaining, reset_after, retry_after, delay}.
--
-- The in-memory state (window W, its count, the count of W - 1) is here: the
-- key of W's parity holds (W, count); the other key holds (W - 1, count) when
-- W - 1 counted anything, and is deleted otherwise. W is the larger stored
-- index. Redis keeps real window indexes, so the in-memory limiter's
-- truncated tag has no counterpart: the two agree wherever that tag decodes
-- exactly (see the Rust side for the range).
--
-- Window n is [n x period, (n + 1) x period). A request is refused with an
-- error reply when its window's successor would end at 2^53 ticks or later,
-- so every value is a whole number below 2^53; the products previous x
-- (period - elapsed) and room x period, which can exceed 2^53, are computed
-- exactly by `muldiv` and `share`. An admission of non-zero cost writes both
-- keys with a TTL until the state is idle (the end of the window after the
-- decided one); a denial or a cost of 0 writes nothing.

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

-- floor(a x b / c) and (a x b) mod c, exact for whole numbers 0 <= a < 2^53
-- and 0 <= b < c < 2^53: long multiplication over the bits of a, keeping the
-- remainder below c (a sum past c is formed as a difference, never above c).
local function muldiv(a, b, c)
  local bit = 1
  while bit * 2 <= a do
    bit = bit * 2
  end
  local q, r = 0, 0
  while bit >= 1 do
    q = q * 2
    if r >= c - r then
      r, q = r - (c - r), q + 1
    else
      r = r + r
    end
    if a >= bit then
      a = a - bit
      if r >= c - b then
        r, q = r - (c - b), q + 1
      else
        r = r + b
      end
    end
    bit = bit / 2
  end
  return q, r
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

-- min(floor(room x period / d), period) for 0 <= room, 1 <= d <= limit:
-- period = q x d + m, so room x period / d = room x q + room x m / d, where
-- room x q < period and room x m < d^2 when room < d.
local function share(room, d)
  if room >= d then
    return period
  end
  local q = floordiv(period, d)
  return room * q + floordiv(room * (period - q * d), d)
end

if cost > limit then
  return redis.error_reply('ERR cost exceeds capacity')
end
if now < 0 or now >= EXACT then
  return redis.error_reply('ERR now out of range')
end

local function load(key)
  local r = redis.call('HMGET', key, 'w', 'n')
  if r[2] then
    return tonumber(r[1]), tonumber(r[2])
  end
  return -1, 0
end

-- The stored state: the latest window, its count, and the count of the
-- window before it.
local w0, n0 = load(KEYS[1])
local w1, n1 = load(KEYS[2])
local stored, stored_current, stored_previous = w1, n1, 0
if w0 > w1 then
  stored, stored_current = w0, n0
  if w1 == w0 - 1 then
    stored_previous = n1
  end
elseif w0 == w1 - 1 then
  stored_previous = n0
end

-- The counts as seen from the window `now` is in.
local now_window = floordiv(now, period)
local window, current, previous = now_window, 0, 0
if stored_current > 0 or stored_previous > 0 then
  if stored >= now_window then
    -- The same window, or a clock that stepped back: stay in it.
    window, current, previous = stored, stored_current, stored_previous
  elseif stored + 1 == now_window then
    previous = stored_current
  end
end

-- Times up to the end of the next window must stay below 2^53: a product
-- past it rounds to 2^53 or more.
local start = window * period
if (window + 2) * period >= EXACT then
  return redis.error_reply('ERR now out of range (windows must end below 2^53 ticks)')
end
-- A `now` before the stored window counts as its start.
local elapsed = math.max(now - start, 0)

-- ceil(previous x (period - elapsed) / period), for elapsed < period.
local weighted = previous
if elapsed > 0 then
  local q, r = muldiv(previous, period - elapsed, period)
  weighted = q
  if r > 0 then
    weighted = q + 1
  end
end
local estimate = weighted + current

-- Ticks from now until the counts have lost all influence; 0: none left.
local function reset_after(cur, prev)
  if cur > 0 then
    return start + 2 * period - now
  elseif prev > 0 then
    return start + period - now
  end
  return 0
end

-- Cost 0 is a probe, as in memory: admitted even when a clock that stepped
-- back sees the previous count at full weight, and nothing is written.
if estimate + cost <= limit or cost == 0 then
  if cost > 0 then
    local ttl = ttl_ms(start + 2 * period - now)
    local slot = window % 2
    local mine, other = KEYS[slot + 1], KEYS[2 - slot]
    redis.call('HSET', mine, 'w', window, 'n', current + cost)
    redis.call('PEXPIRE', mine, ttl)
    if previous > 0 then
      -- It holds window - 1: keep it as long as the state.
      redis.call('PEXPIRE', other, ttl)
    else
      -- Absent, or an older window that no longer counts.
      redis.call('DEL', other)
    end
  end
  return {1, limit, math.max(limit - estimate - cost, 0), reset_after(current + cost, previous), 0, 0}
end

-- The earliest time at which the same cost passes if nothing else arrives.
local retry_at
local room = limit - current - cost
local shrink = 0
if room >= 0 and previous > 0 then
  -- Later in this window: ceil(previous x (period - e) / period) <= room
  -- holds from e = period - floor(room x period / previous).
  shrink = share(room, previous)
end
if shrink > 0 then
  retry_at = start + period - shrink
else
  -- In the next window `current` becomes the previous count, with room =
  -- limit - cost; with no room at all it must leave entirely, a window on.
  room = limit - cost
  local wait = 0
  if current > room then
    wait = period - share(room, current)
  end
  retry_at = start + period + wait
end
return {0, limit, math.max(limit - estimate, 0), reset_after(current, previous), retry_at - now, 0}
