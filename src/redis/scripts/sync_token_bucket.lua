-- Batched sync of token buckets (GCRA): one call carries the records of
-- many keys.
--
-- KEYS[i]       `<prefix>:tb:<quota>:{<tag>}:sync`: the key's global theoretical arrival
--               time (TAT), in microseconds of the nodes' shared clock.
-- ARGV[1]       now, in microseconds (for the TTL).
-- ARGV[2]       a TTL margin in milliseconds, for clock skew between nodes.
-- ARGV[1 + 2i]  the debt the calling node added since its last sync: the
--               cost it admitted times the emission interval, in
--               microseconds, rounded up.
-- ARGV[2 + 2i]  the node's local TAT, in microseconds, rounded up.
--
-- The merge: TAT' = max(TAT + debt, local). Stacking the debt on the global
-- TAT counts every node's admissions once, as if they had arrived while the
-- bucket was still draining other nodes' debt; the local TAT covers the case
-- where the global bucket had refilled (TAT in the past) before this node's
-- admissions. The key lives until TAT' has passed (the bucket is full
-- again) plus the margin.
--
-- Returns one integer per key: TAT'. Times below 2^52 microseconds (the year
-- 2112 for Unix time) keep every value exact in Lua's doubles.
local now = tonumber(ARGV[1])
local margin = tonumber(ARGV[2])
local tats = {}
for i = 1, #KEYS do
  local debt = tonumber(ARGV[1 + 2 * i])
  local tat = tonumber(ARGV[2 + 2 * i])
  local global = tonumber(redis.call('GET', KEYS[i]) or '0')
  local merged = math.max(global + debt, tat)
  if merged ~= global then
    local ttl = margin
    if merged > now then
      -- Both exact integers: the quotient of their difference by 1000 is
      -- never within rounding of a whole number unless it is one.
      ttl = ttl + math.floor((merged - now + 999) / 1000)
    end
    redis.call('SET', KEYS[i], string.format('%.0f', merged), 'PX', ttl)
  end
  tats[i] = merged
end
return tats
