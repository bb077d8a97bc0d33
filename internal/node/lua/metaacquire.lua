-- Take a lock key that carries metadata: acquire.lua (run below as
-- acquire(), after the record is taken out of KEYS); when the key is taken,
-- its metadata record is written in the same call, with the key's TTL, as
-- the token, a newline, then the metadata, so a reader can tell whose it is.
--
-- KEYS[4]  the key's metadata record (a string; see keyspace.Layout.Metadata)
-- the other KEYS as acquire.lua's: KEYS[5..6] are its KEYS[4..5]
-- ARGV[1..8]  as acquire.lua's
-- ARGV[9]  the metadata
--
-- Returns as acquire.lua.
local record = table.remove(KEYS, 4)
local reply = acquire()
if reply[1] == 1 then
  redis.call('SET', record, ARGV[1] .. '\n' .. ARGV[9], 'PX', ARGV[2])
end
return reply
