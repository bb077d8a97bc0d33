-- Renew many permits on one node in one call: renew.lua for each permit
-- key; a permit extended or restored makes its semaphore's limit record, if
-- present, live at least as long (PTTL never lowered). A missing record is
-- not recreated: the next permit taken does.
--
-- KEYS[2i-1]  the key of permit i
-- KEYS[2i]    its semaphore's limit record (see permitacquire.lua)
-- ARGV        as renew.lua's, one triple per permit
--
-- Returns as renew.lua, one integer per permit.
local out = {}
for i = 1, #KEYS / 2 do
  local record, ttl = KEYS[2*i], ARGV[3*i-1]
  out[i] = renew_key(KEYS[2*i-1], ARGV[3*i-2], ttl, ARGV[3*i])
  if out[i] > 0 then
    local left = redis.call('PTTL', record)
    if left >= 0 and left < tonumber(ttl) then
      redis.call('PEXPIRE', record, ttl)
    end
  end
end
return out
