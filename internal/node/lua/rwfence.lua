-- Write a fencing number back to a node for a read-write lock's hold, as
-- fence.lua does for a mutex: only while the hash key described in
-- rwlib.lua still holds the token, as writer or as a reader.
--
-- KEYS and ARGV as fence.lua's. Returns as fence.lua. lib.lua and rwlib.lua
-- come first.
if redis.call('HGET', KEYS[1], 'w') ~= ARGV[1] and not reading(KEYS[1], ARGV[1]) then
  return 0
end
raise(KEYS[2], ARGV[2])
return 1
