-- Batched sync of window counts (fixed window, sliding window counter):
-- one call carries the records of many keys; each record is one window of
-- one key.
--
-- KEYS[i]     `<prefix>:<alg>:<quota>:{<tag>}:sync:<window>`: a hash holding the key's
--             admissions in that window summed over every node (`t`), and an
--             incarnation id (`i`) set by whoever created it, so that a node
--             can tell a count that restarted from zero (Redis lost its data)
--             from one that merely grew.
-- ARGV[1]     the TTL in milliseconds: as long as any decision can look at
--             the window (one period for the fixed window, two for the
--             sliding window counter) plus a margin for clock skew.
-- ARGV[2]     the incarnation id a new hash gets: a random integer below
--             2^52 chosen by the calling node.
-- ARGV[2 + i] the calling node's admissions in KEYS[i]'s window that it has
--             not sent before; 0 to only read.
--
-- Returns two integers per key: the window's total after this call's
-- admissions, and the hash's incarnation id (0 if there is no hash). Counts
-- stay far below 2^53 (each node adds at most the limit, a u32, per
-- window), so Lua's doubles hold them exactly.
local ttl = tonumber(ARGV[1])
local incarnation = ARGV[2]
local out = {}
for i = 1, #KEYS do
  local delta = tonumber(ARGV[2 + i])
  local total, id
  if delta > 0 then
    total = redis.call('HINCRBY', KEYS[i], 't', delta)
    if redis.call('HSETNX', KEYS[i], 'i', incarnation) == 1 then
      id = incarnation
    else
      id = redis.call('HGET', KEYS[i], 'i')
    end
    redis.call('PEXPIRE', KEYS[i], ttl)
  else
    local fields = redis.call('HMGET', KEYS[i], 't', 'i')
    total = tonumber(fields[1] or '0')
    id = fields[2] or '0'
  end
  out[2 * i - 1] = total
  out[2 * i] = tonumber(id)
end
return out
