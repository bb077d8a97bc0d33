-- Write an idempotency record, only while this node's lock key holds the
-- writer's token: a holder whose lock ended here writes nothing.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the record (see lookup.lua)
-- ARGV[1]  the lock's token
-- ARGV[2]  the request's fingerprint
-- ARGV[3]  the response
-- ARGV[4]  the fencing number of the run
-- ARGV[5]  the retention, in milliseconds (> 0)
--
-- Returns 1 when written, 0 when the lock key holds another token or none.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'f', ARGV[2], 'r', ARGV[3], 'n', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
