-- acquire.lua: one attempt on a lock, or on one slot of a Redlock
-- semaphore. Runs after fence.lua, hold.lua and, for a waiter (ARGV[6]),
-- line.lua: without a waiter it calls none of line.lua's helpers, and runs
-- without them (see scripts.go).
--
-- KEYS[1]  the hold                 P{K} for a lock, P{K}:slot:I for slot I
-- KEYS[2]  the key's own hold       P{K}: the lock, or the slots' marker
-- KEYS[3]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the hold as stored       token, or token .. "\n" .. value;
--                                   a fencing token drawn goes in too
--                                   (see hold.lua)
-- ARGV[2]  time to live, in ms
-- ARGV[3]  the limit                1 for a lock, N for a slot
-- ARGV[4]  "1" to draw a fencing token, "0" not to
-- ARGV[5]  the seed step of a missing counter, in microseconds (see
--          fence.lua)
-- ARGV[6]  the waiter making the attempt, absent for none (a lock's
--          only): refused, it joins the line (see line.lua); granted, it
--          leaves it; a lock kept for it, it takes
--
-- A free lock that a waiter would take goes to the first live waiter ahead
-- of it, if any, for the hand-over window, as after a release (the heir of
-- the last release let its window lapse); the waiter stays in line.
--
-- Returns -M when K is held with another limit M; 0 when the hold is
-- taken (or kept for another waiter); otherwise the new fence counter when
-- one was asked for, or 1.
local limit = tonumber(ARGV[3])
local slot = KEYS[1] ~= KEYS[2]
local w = ARGV[6] or ""
-- A slot checks the key's limit before its SET NX; a lock's SET NX comes
-- first, and only a refused one asks which limit holds the key.
local held = slot and held_limit(KEYS[2])
if held and held ~= limit then
	return -held
end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	if w ~= "" and not slot then
		local heir = line_hand(KEYS[2], w)
		if heir then
			line_join(KEYS[2], w, tonumber(ARGV[2]))
			redis.call("PUBLISH", KEYS[2] .. ":released", heir)
			return 0
		end
		line_leave(KEYS[2], w)
	end
else
	local v
	if slot then
		held = held or held_limit(KEYS[2])
	else
		held, v = held_limit(KEYS[2])
	end
	if held and held ~= limit then
		return -held
	end
	if w == "" or slot then
		return 0
	end
	if v ~= "\r" .. w then
		line_join(KEYS[2], w, tonumber(ARGV[2]))
		return 0
	end
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	line_leave(KEYS[2], w)
end
if slot then
	if held then
		marker_stretch(KEYS[2], tonumber(ARGV[2]))
	else
		redis.call("SET", KEYS[2], "\n" .. limit, "PX", ARGV[2])
	end
end
if ARGV[4] ~= "1" then
	return 1
end
local n = fence_draw(KEYS[3], tonumber(ARGV[5]))
redis.call("SET", KEYS[1], hold_fence(ARGV[1], string.format("%.0f", n)), "PX", ARGV[2])
return n
