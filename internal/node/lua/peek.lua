-- Read one key, whatever it holds, without writing: what an operator's
-- inspection of a lock sees on one node.
--
-- KEYS[1]  the key
--
-- Returns {type, pttl, now, value}:
--   type   the key's type as TYPE names it: "none" when missing
--   pttl   as PTTL reports it: -2 missing, -1 no TTL, else milliseconds
--   now    the node's time in milliseconds (TIME)
--   value  a string's value; a hash's fields and values, in pairs; else ""
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
local value = ''
if kind == 'string' then
  value = redis.call('GET', key)
elseif kind == 'hash' then
  value = redis.call('HGETALL', key)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {kind, redis.call('PTTL', key), now, value}
