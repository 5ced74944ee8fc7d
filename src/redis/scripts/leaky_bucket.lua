-- Leaky bucket with nginx `limit_req` semantics: a transliteration of
-- `LeakyBucket::decide` in src/algorithm/leaky_bucket.rs.
--
-- KEYS[1]  a hash: e = the excess in thousandths of a request, l = the
--          millisecond of the last admission that moved it (nginx's `last`);
--          missing = never seen
-- ARGV[1]  now in ticks, or -1: the server's TIME in microseconds
-- ARGV[2]  cost, at most the capacity (burst + 1)
-- ARGV[3]  rate: thousandths of a request per second, 1 to 10^12
-- ARGV[4]  burst x 1000: the most excess an admission may leave
-- ARGV[5]  delay x 1000: the excess above which an admission waits
-- ARGV[6]  ticks per millisecond, at least 1 (time is whole milliseconds,
--          floor(now / ticks per ms), as in nginx)
-- ARGV[7]  grace in milliseconds, added to every TTL (0: exact TTLs)
-- Returns {allowed, limit, remaining, reset_after, retry_after, delay}.
--
-- A request at now_ms drains rate x ms / 1000 since `last`, floored at one
-- request below empty, then adds 1000 x cost:
-- excess = max(max(old - leak, -1000) + 1000 x cost, 0); it is admitted if
-- excess <= burst x 1000. An admission of non-zero cost stores the excess
-- and, only if ms != 0, last = now_ms; a denial or a cost of 0 writes
-- nothing. A reading earlier than `last` counts as ms = 0.
--
-- Every value is a whole number below 2^53. The longest drain, of a full
-- bucket plus one request, is `horizon` ms (at most 2^51 ticks, so every
-- `now` below 2^52 is served): a request at now >= 2^53 -
-- horizon x ticks-per-ms is refused with an error reply, so every stored
-- `last` and every millisecond the durations reach, at most last + horizon,
-- are below 2^53 ticks. The leak rate x ms is only computed when it is below
-- (excess + 1000) x 1000 (the floor applies otherwise). Unlike the in-memory
-- word, the hash holds any millisecond, so there is no 2^41 ms clamp; below
-- 2^53 ns the two never differ. An admission sets a TTL of the time until
-- the bucket has drained to a new key's level (the state is idle from then
-- on) plus the grace.

local EXACT = 9007199254740992 -- 2^53
local UNIT = 1000 -- thousandths of a request per request

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

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == -1 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local delay = tonumber(ARGV[5])
local ticks_per_ms = tonumber(ARGV[6])
local grace_ms = tonumber(ARGV[7])
local capacity = floordiv(burst, UNIT) + 1

-- `ticks` in whole milliseconds, rounded up, at least 1.
local function ttl_ms(ticks)
  local ms = floordiv(ticks, ticks_per_ms)
  if ms * ticks_per_ms < ticks then
    ms = ms + 1
  end
  return math.max(ms, 1)
end

-- The smallest ms after which the drain has removed at least `amount`
-- thousandths: rate x ms / 1000 >= amount (nginx truncates the division).
local function drain_ms(amount)
  return floordiv(amount * UNIT + rate - 1, rate)
end

if cost > capacity then
  return redis.error_reply('ERR cost exceeds capacity')
end
local horizon = drain_ms(burst + UNIT)
if now < 0 or now >= EXACT - horizon * ticks_per_ms then
  return redis.error_reply('ERR now out of range (below 2^53 - drain ticks)')
end
local now_ms = floordiv(now, ticks_per_ms)

-- Ticks from now until millisecond `ms` starts, 0 if it has.
local function until_ms(ms)
  return math.max(ms * ticks_per_ms - now, 0)
end

-- Ticks from now until a stored (excess, last) has drained to a new key's
-- level (one request below empty): the key is idle from then on.
local function reset_of(excess, last)
  return until_ms(last + drain_ms(excess + UNIT))
end

local stored = redis.call('HMGET', key, 'e', 'l')
local old_excess, old_last = tonumber(stored[1]), tonumber(stored[2])
local known = old_excess ~= nil and old_last ~= nil

-- The level the drain leaves at now_ms, floored at -1000 (a new key's
-- level), and the `last` an admission would store.
local level, last
if known then
  -- A step back counts as no time elapsed and keeps `last`.
  local ms = math.max(now_ms - old_last, 0)
  if ms >= drain_ms(old_excess + UNIT) then
    level = -UNIT
  else
    -- Here rate x ms < (old_excess + 1000) x 1000: exact.
    level = old_excess - floordiv(rate * ms, UNIT)
  end
  if ms ~= 0 then
    last = now_ms
  else
    last = old_last
  end
else
  level, last = -UNIT, now_ms
end
local excess = math.max(level + UNIT * cost, 0)

if excess <= burst then
  local level_after, reset = level, 0
  if cost > 0 then
    level_after = excess
    reset = reset_of(excess, last)
    redis.call('HSET', key, 'e', excess, 'l', last)
    redis.call('PEXPIRE', key, ttl_ms(reset) + grace_ms)
  elseif known then
    reset = reset_of(old_excess, old_last)
  end
  local remaining = floordiv(burst - level_after, UNIT)
  local wait_ms = floordiv(math.max(excess - delay, 0) * UNIT, rate)
  return {1, capacity, remaining, reset, 0, wait_ms * ticks_per_ms}
end

-- Only a known key can be denied: a new key's first request leaves at most
-- 1000 x (capacity - 1) = burst.
if not known then
  old_excess, old_last = 0, now_ms
end
local remaining = floordiv(math.max(burst - level, 0), UNIT)
-- It passes once the drain since `last` has removed what the cost
-- overshoots by.
local over = math.max(old_excess + UNIT * cost - burst, 0)
local retry = until_ms(old_last + drain_ms(over))
return {0, capacity, remaining, reset_of(old_excess, old_last), retry, 0}
