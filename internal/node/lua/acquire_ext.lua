-- The acquire script (see acquire.lua) with two additions, used when a Mutex
-- asks for fencing tokens or its node set keeps restarted nodes in
-- quarantine.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the node's marker key: it has no TTL, so it disappears only when
--          the node loses its data (an empty restart); the script recreates it
-- KEYS[3]  the node set's fencing counter: no TTL, one per node set
-- ARGV[1]  the token
-- ARGV[2]  the TTL in milliseconds (> 0)
-- ARGV[3]  the marker value to create if the marker is missing, or "" to
--          leave the marker alone
-- ARGV[4]  "1" to draw a fencing number when the key is taken
--
-- Returns {acquired, pttl, marker, fence, counter}:
--   acquired  1 when the key now holds the token, else 0
--   pttl      the other holder's remaining TTL in ms when acquired is 0
--   marker    the marker's value after the call ("" when not asked)
--   fence     the counter after INCR when acquired and asked; 0 when the
--             counter is missing (this node lost it, or never had one);
--             -1 when not asked or not acquired but the counter exists
--   counter   the counter's value after the call when asked, 0 if missing
local acquired, pttl = 0, 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  acquired = 1
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  acquired = 1
else
  pttl = redis.call('PTTL', KEYS[1])
end

local marker = ''
if ARGV[3] ~= '' then
  marker = redis.call('GET', KEYS[2])
  if not marker then
    redis.call('SET', KEYS[2], ARGV[3])
    marker = ARGV[3]
  end
end

local fence, counter = -1, 0
if ARGV[4] == '1' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    fence = 0
  elseif acquired == 1 then
    fence = redis.call('INCR', KEYS[3])
    counter = fence
  else
    counter = tonumber(redis.call('GET', KEYS[3])) or 0
  end
end
return {acquired, pttl, marker, fence, counter}
