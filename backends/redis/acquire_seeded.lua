-- acquire_seeded.lua: acquire.lua for Redlock nodes, whose fence counters
-- must survive the loss of a node's data. Runs after fence.lua.
--
-- KEYS[1]  the hold                 P{K}
-- KEYS[2]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  "1" to draw a fencing token, "0" not to
-- ARGV[4]  the seed step, in microseconds (at least 1)
--
-- A missing counter starts at the server's clock rounded down to the seed
-- step (see fence.lua), so that nodes which seed it at nearly the same
-- time start it equal. That is above every token issued before as long as
-- the nodes' clocks agree to within the restart quarantine less the step.
--
-- Returns 0 when the key is held already; otherwise the new counter, or 1
-- when none was asked for.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 0
end
if ARGV[3] ~= "1" then
	return 1
end
return fence_draw(KEYS[2], tonumber(ARGV[4]))
