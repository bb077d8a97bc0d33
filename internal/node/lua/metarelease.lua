-- Release a lock key that carries metadata: release.lua (run below as
-- release(), after the record is taken out of KEYS); the key's metadata
-- record is deleted when it is the token's, and, when it was, "m <key>" is
-- published on the key's release channel, which observers of the key
-- watch (best effort, as tell in lib.lua).
--
-- KEYS[5]  the key's metadata record (see metaacquire.lua)
-- the other KEYS and ARGV as release.lua's
--
-- Returns as release.lua.
local record = table.remove(KEYS, 5)
local reply = release()
local kept = redis.call('GET', record)
if kept and string.sub(kept, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  redis.call('DEL', record)
  if ARGV[2] ~= '' then
    redis.pcall('PUBLISH', ARGV[2], 'm ' .. KEYS[1])
  end
end
return reply
