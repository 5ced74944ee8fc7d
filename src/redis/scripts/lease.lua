-- Quota leases on fixed-window budgets: one call carries the requests of
-- many keys. Each window of each key has a budget of `limit` units; nodes
-- take slices of it and give back what they did not use.
--
-- KEYS[i]     `<prefix>:<budget>:{<tag>}:lease:<window>`: units of that window's budget
--             granted to nodes and not given back.
-- ARGV[1]     the limit: the budget of every window.
-- ARGV[2]     the TTL in milliseconds: at least until the window has ended
--             on every node's clock (a key that expired early would reopen
--             the budget), so two periods plus a margin.
-- ARGV[2 + i] > 0: units asked for from KEYS[i]'s window; < 0: units given
--             back to it.
--
-- A request gets min(asked, limit - granted) atomically: the units granted
-- for a window never exceed the limit, whatever the nodes do. A return
-- subtracts at most what is granted, and only while the window's key exists
-- (units of an ended window die with it).
--
-- Returns two integers per key: the units granted (request) or taken back
-- (return), and the window's granted total afterwards.
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local amount = tonumber(ARGV[2 + i])
  local granted = tonumber(redis.call('GET', KEYS[i]) or '0')
  local moved = 0
  if amount > 0 then
    moved = math.min(amount, limit - granted)
    if moved > 0 then
      granted = redis.call('INCRBY', KEYS[i], moved)
      redis.call('PEXPIRE', KEYS[i], ttl)
    else
      moved = 0
    end
  elseif amount < 0 then
    moved = math.min(-amount, granted)
    if moved > 0 then
      granted = redis.call('DECRBY', KEYS[i], moved)
    end
  end
  out[2 * i - 1] = moved
  out[2 * i] = granted
end
return out
