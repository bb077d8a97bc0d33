-- Take the lock key for one token, as SET key token NX PX ttl does, and also
-- count a key that already holds this very token as taken: that is an earlier
-- attempt of the same acquisition whose SET landed after its reply was lost.
-- Its TTL is reset, so the validity computed for this attempt is not overstated.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token (random, one per acquisition)
-- ARGV[2]  the TTL in milliseconds (> 0)
--
-- Returns {1, 0} when the key now holds the token with the full TTL, or
-- {0, pttl} when another token holds it; pttl is that key's remaining TTL in
-- milliseconds (-1 if it has none). A key of another type fails with WRONGTYPE.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 0}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
