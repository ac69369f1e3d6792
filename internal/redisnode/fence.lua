-- fence.lua: the helper that draws a fencing token, put in front of the
-- scripts that draw one.
--
-- fence_draw(k, step) increments the fence counter k (one per hash slot:
-- see fence.go) and returns it. A missing counter (never used, or lost in
-- a restart without persistence) starts at the server's clock in
-- microseconds, rounded down to a multiple of step (at least 1). That is
-- above every token drawn from it before, as long as the clock, less the
-- step, reads later than when they were drawn, and counters grow slower
-- than a million a second.
local function fence_draw(k, step)
	-- INCR makes a missing counter 1. A counter is never 0 otherwise (a
	-- seed is a clock reading), and raising one is always safe.
	local n = redis.call("INCR", k)
	if n == 1 then
		-- Exact in a double: microseconds since 1970 stay below 2^53.
		local t = redis.call("TIME")
		local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
		n = us - us % step + 1
		redis.call("SET", k, string.format("%.0f", n))
	end
	return n
end
