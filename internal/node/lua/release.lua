-- Delete the lock key, only while it still holds our token, so a release that
-- comes late never deletes the next owner's lock.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
--
-- Returns 1 when the key was deleted, 0 when it is missing (expired, or
-- already released), -1 when it holds another token. A key of another type
-- fails with WRONGTYPE.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
if holder == false then
  return 0
end
return -1
