-- Replace the metadata of a held lock key: only while the key holds the
-- token, keeping the key's remaining TTL; then publish "m <key>" on the
-- key's release channel, which observers of the key watch (best effort).
--
-- KEYS[1]  the lock key
-- KEYS[2]  its metadata record (see metaacquire.lua)
-- ARGV[1]  the token
-- ARGV[2]  the new metadata
-- ARGV[3]  the key's release channel, or "" to tell no one
--
-- Returns 1 when written, 0 when the key is missing or another token holds
-- it (nothing written). A key of another type fails with WRONGTYPE.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- PTTL is 0 in the key's last millisecond; PX needs at least 1.
local pttl = math.max(redis.call('PTTL', KEYS[1]), 1)
redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[2], 'PX', pttl)
if ARGV[3] ~= '' then
  redis.pcall('PUBLISH', ARGV[3], 'm ' .. KEYS[1])
end
return 1
