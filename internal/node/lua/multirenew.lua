-- Renew many leases of locks on several keys in one call: for each lease,
-- renew.lua for all of its keys together. Its keys' TTLs are reset only when
-- every one holds its token; missing keys are put back (SET NX) only when
-- asked and no key of the lease is held by another token. A key held by
-- another token is never touched.
--
-- KEYS            the keys of lease 1, then those of lease 2, ...
-- ARGV[4i-3]      lease i's token
-- ARGV[4i-2]      its TTL in milliseconds (> 0)
-- ARGV[4i-1]      "1" to restore missing keys, "0" not to
-- ARGV[4i]        how many keys it has
--
-- Returns one integer per lease, as renew.lua: 1 extended, 2 restored (some
-- key was missing and was put back), 0 some key missing (nothing changed),
-- -1 some key held by another token (nothing changed), -2 some key of
-- another type.
local out = {}
local k = 0
for i = 1, #ARGV / 4 do
  local token, ttl, restore, count = ARGV[4*i-3], ARGV[4*i-2], ARGV[4*i-1], tonumber(ARGV[4*i])
  local wrong, other, missing = false, false, false
  local have = {}
  for j = 1, count do
    local holder = redis.pcall('GET', KEYS[k+j])
    if type(holder) == 'table' and holder.err then
      wrong = true
    elseif holder == token then
      have[j] = true
    elseif holder then
      other = true
    else
      missing = true
    end
  end
  if wrong then
    out[i] = -2
  elseif other then
    out[i] = -1
  elseif missing and restore ~= '1' then
    out[i] = 0
  else
    for j = 1, count do
      if have[j] then
        redis.call('PEXPIRE', KEYS[k+j], ttl)
      else
        redis.call('SET', KEYS[k+j], token, 'NX', 'PX', ttl)
      end
    end
    out[i] = missing and 2 or 1
  end
  k = k + count
end
return out
