-- Sliding window log: a transliteration of `SlidingWindowLog::check` in
-- src/algorithm/sliding_window_log.rs (advance, then decide, then record).
--
-- KEYS[1]  a sorted set: one member per admission time, score = the time in
--          ticks, member = "<time>:<cost>" (cost >= 1; same-time admissions
--          share a member); plus the member "~<latest>:<used>" at score
--          +inf: the latest reading any check has seen and the sum of the
--          entries' costs. Missing = never seen (latest 0, empty log).
-- ARGV[1]  now in ticks, or -1: the server's TIME in microseconds
-- ARGV[2]  cost, at most the limit
-- ARGV[3]  limit: the most cost in any window, at least 1; also the capacity
-- ARGV[4]  period: the window length in ticks, 1 to 2^51
-- ARGV[5]  ticks per millisecond, for the TTL, at least 1
-- ARGV[6]  grace in milliseconds, added to every TTL (0: exact TTLs)
-- Returns {allowed, limit, remaining, reset_after, retry_after, delay}.
--
-- The window at `at` is (at - period, at]: an entry at t is expired once
-- at - t >= period. A reading earlier than `latest` counts as `latest` (no
-- time elapsed): admissions are recorded at it and entries dropped at it stay
-- dropped; durations are still measured from the `now` given.
--
-- Every value is a whole number below 2^53 (every `now` below 2^52 is
-- served, as the period is at most 2^51): a request whose time,
-- max(now, latest), is 2^53 - period or later is refused with an error reply,
-- so stored times t satisfy t + period < 2^53 and each duration
-- t + period - now is below 2^53. Each check stores the new latest reading
-- and drops the expired entries (ZREMRANGEBYSCORE), appends an admission,
-- and sets a TTL of the time until the newest entry leaves the window (the
-- state is idle from then on) plus the grace. The set holds at most
-- limit + 1 members.

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

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == -1 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local ticks_per_ms = tonumber(ARGV[5])
local grace_ms = tonumber(ARGV[6])

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

-- The cost carried by an entry's member "<time>:<cost>".
local function cost_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- Ticks from `now` until an entry at `t` leaves the window, 0 if it has:
-- t + period - now, computed as a difference of values below 2^53.
local function until_expiry(t)
  local elapsed = now - t
  if elapsed >= period then
    return 0
  end
  return period - elapsed
end

-- The state: `latest` and `used` from the member at +inf.
local head = redis.call('ZRANGE', key, -1, -1)[1]
local latest, used = 0, 0
if head then
  local l, u = string.match(head, '^~(%d+):(%d+)$')
  latest, used = tonumber(l), tonumber(u)
end

-- Advance: the log's clock moves to `at` (never back), and the entries
-- expired at `at` (time <= at - period) are dropped.
local at = math.max(now, latest)
if at >= EXACT - period then
  return redis.error_reply('ERR now out of range (below 2^53 - period ticks)')
end
local cutoff = at - period
local expired = redis.call('ZRANGEBYSCORE', key, '-inf', cutoff)
if #expired > 0 then
  for _, member in ipairs(expired) do
    used = used - cost_of(member)
  end
  -- Cost 0 is a probe, as in memory: it writes nothing (not even the
  -- expiry of old entries or the log's clock), so a clock that steps back
  -- afterwards sees the log as it was.
  if cost > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  end
end

-- The newest live entry: the member just below the one at +inf.
local newest = redis.call('ZREVRANGE', key, 1, 1, 'WITHSCORES')
local newest_member, newest_at = newest[1], newest[2] and tonumber(newest[2])

local result
local after = used + cost
-- Cost 0 is a probe: admitted even over a lowered limit.
if after <= limit or cost == 0 then
  local reset = 0
  if cost > 0 then
    reset = until_expiry(at)
    -- Record: a same-time admission joins the newest entry.
    if newest_at == at then
      redis.call('ZREM', key, newest_member)
      cost = cost + cost_of(newest_member)
    end
    redis.call('ZADD', key, at, string.format('%d:%d', at, cost))
    used = after
  elseif newest_member then
    reset = until_expiry(newest_at)
  end
  result = {1, limit, math.max(limit - after, 0), reset, 0, 0}
else
  -- The oldest live entries must leave until `need` cost is freed; the last
  -- of them to leave sets the retry time. They hold used > limit - cost =
  -- used - need, and each holds at least 1, so the first `need` suffice.
  local need = after - limit
  local oldest = redis.call('ZRANGE', key, 0, need - 1, 'WITHSCORES')
  local freed, retry = 0, 0
  for i = 1, #oldest, 2 do
    freed = freed + cost_of(oldest[i])
    if freed >= need then
      retry = until_expiry(tonumber(oldest[i + 1]))
      break
    end
  end
  result = {0, limit, limit - used, until_expiry(newest_at), retry, 0}
end

-- Store the latest reading and the sum; the TTL covers the time until the
-- newest entry leaves the window (reset_after), when the state is idle.
if cost == 0 then
  return result
end
local new_head = string.format('~%d:%d', at, used)
if new_head ~= head then
  if head then
    redis.call('ZREM', key, head)
  end
  redis.call('ZADD', key, '+inf', new_head)
end
redis.call('PEXPIRE', key, ttl_ms(result[4]) + grace_ms)
return result
