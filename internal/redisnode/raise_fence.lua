-- raise_fence.lua: Redlock's second round, the write-back of a token.
--
-- KEYS[1]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the token
--
-- Raises the counter to the token unless it is there already, so that any
-- later acquisition whose quorum includes this node draws a larger one.
local c = redis.call("GET", KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
	redis.call("SET", KEYS[1], ARGV[1])
end
return 1
