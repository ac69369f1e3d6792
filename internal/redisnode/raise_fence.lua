-- raise_fence.lua: Redlock's second round, the write-back of a token.
-- Runs after hold.lua.
--
-- KEYS[1]  the fence counter        P fence:{T}, T in K's slot
-- KEYS[2]  the hold                 P{K} for a lock, P{K}:slot:I for slot I
-- ARGV[1]  the token
-- ARGV[2]  the hold's own token     (the random one that owns it)
--
-- Raises the counter to the token unless it is there already, so that any
-- later acquisition whose quorum includes this node draws a larger one;
-- and, where the node has the hold, records the token in it, so that the
-- nodes that hold it agree on its token (see holds.lua).
local c = redis.call("GET", KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
	redis.call("SET", KEYS[1], ARGV[1])
end
local v = redis.call("GET", KEYS[2])
if v and hold_owned(v, ARGV[2]) then
	local ttl = redis.call("PTTL", KEYS[2])
	if ttl > 0 then
		redis.call("SET", KEYS[2], hold_fence(v, ARGV[1]), "PX", ttl)
	end
end
return 1
