-- Renew many read holds (mode 'r') or write holds (mode 'w') of read-write
-- locks on one node in one call: renew.lua for the hash keys described in
-- rwlib.lua. A missing hold is put back, when asked, only where nobody holds
-- the key in the other mode (or as another writer).
--
-- KEYS and ARGV as renew.lua's. Returns one integer per key as renew.lua:
-- 1 extended, 2 restored, 0 missing (not restored), -1 held by another
-- owner, -2 a key of another type. lib.lua and rwlib.lua come first.
local out = {}
for i, key in ipairs(KEYS) do
  local token, ttl, restore = ARGV[3*i-2], tonumber(ARGV[3*i-1]), ARGV[3*i]
  local writer = redis.pcall('HGET', key, 'w')
  if type(writer) == 'table' and writer.err then
    out[i] = -2
  elseif mode == 'w' then
    if writer == token then
      redis.call('PEXPIRE', key, ttl)
      out[i] = 1
    elseif writer or readers(key) > 0 then
      out[i] = -1
    elseif restore == '1' then
      redis.call('HSET', key, 'w', token)
      redis.call('PEXPIRE', key, ttl)
      out[i] = 2
    else
      out[i] = 0
    end
  elseif writer then
    out[i] = -1
  elseif reading(key, token) then
    read_until(key, token, ttl)
    out[i] = 1
  elseif restore == '1' then
    read_until(key, token, ttl)
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
