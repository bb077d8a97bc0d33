-- Take the lock of an idempotency key: acquire.lua (run below as
-- acquire(), after the record is taken out of KEYS), refused while the
-- key's record exists: the key completed, and its response is replayed.
-- This is the check under the lock, made in the same call that takes it.
--
-- KEYS[4]  the key's record (see lookup.lua)
-- the other KEYS, and ARGV, as acquire.lua's: KEYS[5..6] are its KEYS[4..5]
--
-- Returns as acquire.lua; when the record exists, nothing is taken or
-- queued, pttl is -4 and "recorded" comes 8th.
local record = table.remove(KEYS, 4)
if redis.call('EXISTS', record) == 1 then
  local marker, fence, counter, age = marker_and_fence(KEYS[4], KEYS[5], ARGV[7], ARGV[8], 0)
  return {0, -4, redis.call('ZCARD', KEYS[2]), marker, fence, counter, age, 'recorded'}
end
return acquire()
