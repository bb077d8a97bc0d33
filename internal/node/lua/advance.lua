-- Raise the node set's fencing counter to a number, never lowering it: the
-- first step of an operator's forced unlock, so that every later fencing
-- number is above the evicted holder's. "0" only reads it.
--
-- KEYS[1]  the fencing counter
-- ARGV[1]  the number (an integer below 2^53), or "0"
--
-- Returns the counter after the call, 0 if missing. A counter that is not
-- an integer fails the call.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if current == nil then
  return redis.error_reply('ERR the fencing counter ' .. KEYS[1] .. ' is not an integer')
end
if current < want then
  redis.call('SET', KEYS[1], ARGV[1])
  current = want
end
return current
