-- Renew many permits, or Mutexes with metadata, on one node in one call:
-- renew.lua for each key; a key extended or restored makes its record, if
-- present, live at least as long (PTTL never lowered). A key restored gets
-- its record back, with SET NX (one kept, of any token, is left as it is).
--
-- KEYS[2i-1]  the key of lease i
-- KEYS[2i]    its record: a semaphore's limit (see permitacquire.lua) or a
--             Mutex's metadata (metaacquire.lua)
-- ARGV        as renew.lua's, one quadruple per lease: its triple, then
--             the record to put back beside a restored key ("": none)
--
-- Returns as renew.lua, one integer per lease.
local out = {}
for i = 1, #KEYS / 2 do
  local record, ttl = KEYS[2*i], ARGV[4*i-2]
  out[i] = renew_key(KEYS[2*i-1], ARGV[4*i-3], ttl, ARGV[4*i-1])
  if out[i] == 2 and ARGV[4*i] ~= '' then
    redis.call('SET', record, ARGV[4*i], 'NX', 'PX', ttl)
  end
  if out[i] > 0 then
    local left = redis.call('PTTL', record)
    if left >= 0 and left < tonumber(ttl) then
      redis.call('PEXPIRE', record, ttl)
    end
  end
end
return out
