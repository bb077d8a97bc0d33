-- Release the lock of an idempotency key: release.lua (run below as
-- release()), after writing the key's record when asked, only while the
-- lock key holds the token: a holder whose lock ended here writes nothing.
-- So the record is written exactly where the release answers 1 (deleted).
--
-- KEYS[5]  the key's record: a hash {f = fingerprint, r = response,
--          n = fencing number}
-- ARGV[8]  the request's fingerprint; absent: write no record (a failed
--          run, a rollback)
-- ARGV[9]  the response
-- ARGV[10] the run's fencing number
-- ARGV[11] the retention, in milliseconds (> 0)
-- the other KEYS and ARGV, and the reply, as release.lua's.
if ARGV[8] and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'f', ARGV[8], 'r', ARGV[9], 'n', ARGV[10])
  redis.call('PEXPIRE', KEYS[5], ARGV[11])
end
return release()
