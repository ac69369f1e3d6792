-- acquire_seeded.lua: acquire.lua for Redlock nodes, whose fence counters
-- must survive the loss of a node's data.
--
-- KEYS[1]  the hold                 P{K}
-- KEYS[2]  the fence counter        P{K}:fence
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  "1" to draw a fencing token, "0" not to
-- ARGV[4]  the seed step, in microseconds (at least 1)
--
-- A missing counter (never used, or lost in a restart without persistence)
-- starts at the server's clock in microseconds rounded down to a multiple
-- of the seed step. That is above every token issued before as long as the
-- nodes' clocks agree to within the restart quarantine less the step, and
-- counters grow slower than a million a second. The rounding lets nodes
-- that seed a new key at nearly the same time start it equal.
--
-- Returns 0 when the key is held already; otherwise the new counter, or 1
-- when none was asked for.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 0
end
if ARGV[3] ~= "1" then
	return 1
end
-- INCR makes a missing counter 1; a counter is never 0 otherwise (a seed
-- is a clock reading), and raising it is always safe.
local n = redis.call("INCR", KEYS[2])
if n == 1 then
	-- Exact in a double: microseconds since 1970 stay below 2^53.
	local t = redis.call("TIME")
	local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
	n = us - us % tonumber(ARGV[4]) + 1
	redis.call("SET", KEYS[2], string.format("%.0f", n))
end
return n
