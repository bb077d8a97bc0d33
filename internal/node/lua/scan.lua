-- One step of a search for keys by pattern (SCAN cursor MATCH pattern
-- COUNT count), without writing: how an operator's inspection finds a
-- semaphore's permits.
--
-- KEYS[1]  a key of the slot whose shard is searched on Cluster nodes (not read)
-- ARGV[1]  the cursor: "0" to start
-- ARGV[2]  the pattern, in SCAN's glob syntax
-- ARGV[3]  how many keys to look at (SCAN's COUNT)
--
-- Returns {cursor, key...}: the cursor of the next step ("0": done) and the
-- matching keys this step found (SCAN may return a key twice).
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = {r[1]}
for _, key in ipairs(r[2]) do
  out[#out + 1] = key
end
return out
