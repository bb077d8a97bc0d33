-- Release the lock of an idempotency key: release.lua (run below as
-- release()), after writing the key's record when asked, while the lock
-- key holds the token, or holds nothing and no record is there: the run
-- completed, and its lock expired here (the release came late: an outage
-- longer than the lock's validity) with no other run taking it since. A
-- lock key held by another token (a run in progress) gets no record.
--
-- KEYS[5]  the key's record: a hash {f = fingerprint, r = response,
--          n = fencing number}
-- ARGV[8]  the request's fingerprint; absent: write no record (a failed
--          run, a rollback)
-- ARGV[9]  the response
-- ARGV[10] the run's fencing number
-- ARGV[11] the retention, in milliseconds (> 0)
-- the other KEYS and ARGV, and the reply, as release.lua's, but for a record
-- written where the lock key held nothing: status 2, as a release of ours,
-- since the release's purpose, the record, is achieved there.
local holder = redis.call('GET', KEYS[1])
local late = ARGV[8] and not holder and redis.call('EXISTS', KEYS[5]) == 0
if ARGV[8] and (holder == ARGV[1] or late) then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'f', ARGV[8], 'r', ARGV[9], 'n', ARGV[10])
  redis.call('PEXPIRE', KEYS[5], ARGV[11])
end
local reply = release()
if late and reply[1] == 0 then
  reply[1] = 2
end
return reply
