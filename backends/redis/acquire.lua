-- acquire.lua: one attempt to obtain a hold. Runs after fence.lua.
--
-- KEYS[1]  the hold                 P{K}
-- KEYS[2]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  "1" to draw a fencing token, "0" not to
-- ARGV[4]  the seed step of a missing counter, in microseconds (see
--          fence.lua): 1 on a single server
--
-- Returns 0 when the key is held already by a lock; -M when it is held by
-- a semaphore of size M (see sem_common.lua: a live set has live holders);
-- otherwise the new fence counter when one was asked for, or 1 when none
-- was.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	if redis.call("TYPE", KEYS[1]).ok == "zset" then
		local s = redis.call("ZSCORE", KEYS[1], "")
		if s then
			return tonumber(s)
		end
	end
	return 0
end
if ARGV[3] == "1" then
	return fence_draw(KEYS[2], tonumber(ARGV[4]))
end
return 1
