-- Take a semaphore's permit: acquire.lua (run below as acquire(), after the
-- record is taken out of KEYS), refused when the node holds another limit
-- for the semaphore. A permit taken makes the semaphore's limit record live
-- at least as long as it (PTTL never lowered), so the record lasts as long
-- as the longest permit taken or renewed (see permitrenew.lua).
--
-- KEYS[4]  the semaphore's limit record: its limit, as a string
-- the other KEYS as acquire.lua's: KEYS[5..6] are its KEYS[4..5]
-- ARGV[1..8]  as acquire.lua's
-- ARGV[9]  the semaphore's limit
--
-- Returns as acquire.lua; when the record holds another limit, nothing is
-- taken or queued, pttl is -4 and the stored limit comes 8th.
local record, limit = table.remove(KEYS, 4), ARGV[9]
local stored = redis.call('GET', record)
if stored and stored ~= limit then
  local marker, fence, counter, age = marker_and_fence(KEYS[4], KEYS[5], ARGV[7], ARGV[8], 0)
  return {0, -4, redis.call('ZCARD', KEYS[2]), marker, fence, counter, age, stored}
end
local reply = acquire()
if reply[1] == 1 and redis.call('PTTL', record) < tonumber(ARGV[2]) then
  redis.call('SET', record, limit, 'PX', ARGV[2])
end
return reply
