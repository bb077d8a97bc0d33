-- Renew many leases on one node in one call: for each lock key, reset its TTL
-- while it holds the lease's token (PEXPIRE semantics: set, not added), and,
-- when asked, put the token back on a key that is missing, with SET NX, so a
-- node that lost it (a restart without persistence, an eviction) holds it
-- again. A key held by another token is never touched.
--
-- KEYS[i]         the lock key of lease i
-- ARGV[3i-2]      its token
-- ARGV[3i-1]      its TTL in milliseconds (> 0)
-- ARGV[3i]        "1" to restore a missing key, "0" not to
--
-- Returns one integer per key: 1 extended, 2 restored, 0 missing (not
-- restored), -1 held by another token. A key of another type gives -2.
-- renew_key (lib.lua) does it for one key. lib.lua comes first.
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = renew_key(key, ARGV[3*i-2], ARGV[3*i-1], ARGV[3*i])
end
return out
