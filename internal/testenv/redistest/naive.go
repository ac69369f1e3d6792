package redistest

import goredis "github.com/redis/go-redis/v9"

// NaiveSemAcquire is one node's part of the naive majority semaphore, the
// design a Redlock semaphore must not use, kept as the negative control of
// the semaphore checks: a sorted set of holders scored by expiry on the
// server's clock, admitting a token while fewer than the limit are live. A
// client holds a permit when a majority of the nodes admitted it; with 5
// nodes and size 2, clients admitted by nodes {0,1,2}, {2,3,4} and {0,1,3}
// each hold a majority while no node admits more than 2.
//
// KEYS[1] the set; ARGV[1] the token, ARGV[2] the limit, ARGV[3] the TTL in
// milliseconds. Returns 1 if admitted.
var NaiveSemAcquire = goredis.NewScript(`local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[2]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1`)
