-- Write a fencing number back to a node: raise the node set's counter to it
-- (never lower it), and only while the lock key still holds our token, so a
-- holder that already lost the lock cannot seed anything.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- ARGV[1]  the token
-- ARGV[2]  the fencing number (a positive integer below 2^53)
--
-- Returns 1 when the counter is now at least the number, 0 when the key no
-- longer holds the token. lib.lua comes first.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
raise(KEYS[2], ARGV[2])
return 1
