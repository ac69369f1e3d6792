-- acquire_seeded.lua: acquire.lua for Redlock nodes, whose fence counters
-- must survive the loss of a node's data.
--
-- KEYS[1]  the hold                 P{K}
-- KEYS[2]  the fence counter        P{K}:fence
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  "1" to draw a fencing token, "0" not to
--
-- A missing counter (never used, or lost in a restart without persistence)
-- starts at the server's clock in microseconds, which is above every token
-- issued before as long as the nodes' clocks agree to within the restart
-- quarantine and counters grow slower than a million a second.
--
-- Returns 0 when the key is held already; otherwise the new counter, or 1
-- when none was asked for.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 0
end
if ARGV[3] ~= "1" then
	return 1
end
if redis.call("EXISTS", KEYS[2]) == 0 then
	local t = redis.call("TIME")
	redis.call("SET", KEYS[2], t[1] .. string.format("%06d", tonumber(t[2])))
end
return redis.call("INCR", KEYS[2])
