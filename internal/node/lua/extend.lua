-- Reset the TTL of the lock key, only while it still holds our token. It never
-- creates the key: a lock that expired or passed to another owner stays so.
-- The TTL is set, not added to what remains (PEXPIRE semantics).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
-- ARGV[2]  the new TTL in milliseconds (> 0)
--
-- Returns 1 when the TTL was reset, 0 when the key is missing or holds another
-- token. A key of another type fails with WRONGTYPE.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
