-- Delete the lock key, only while it still holds our token, so a release that
-- comes late never deletes the next owner's lock; then tell the waiters.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
-- ARGV[2]  the release channel to publish the token on once deleted, or ""
--
-- Returns 1 when the key was deleted, 0 when it is missing (expired, or
-- already released), -1 when it holds another token. A key of another type
-- fails with WRONGTYPE.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    -- Best effort: the key is deleted, and a script is not rolled back, so
    -- a PUBLISH refused (an ACL user without it) must not turn the release
    -- into an error. Waiters then look again at the holder's expiry.
    redis.pcall('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
if holder == false then
  return 0
end
return -1
