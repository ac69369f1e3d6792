-- line.lua: the helpers of the scripts that meet a lock's line of
-- waiters, put in front of them (after hold.lua).
--
-- A lock keeps a line of waiters (backends.Request.Waiter): the sorted set
-- P{K}:line of their names, all scored 0, so that its order is the names'
-- byte order, which is arrival order. A waiter counts while its liveness
-- key P{K}:w:NAME lives: TTL after its last refused attempt. A released
-- lock goes to the first live waiter: P{K} holds the reservation "\r" ..
-- NAME (never a hold: no token starts with "\r") for a hand-over window,
-- in which only that waiter's attempt takes it; then it is free, but a
-- waiter with a place takes it only if no live waiter is ahead of it:
-- otherwise it is kept for the first of those (see acquire.lua).

-- line_join puts waiter w in the line of the lock own, or keeps its place
-- there, for ttl ms; the line lives as long as its longest-lived place,
-- and no longer: a release tells waiters only while the line has someone
-- in it, and a line outlives its last live waiter by that waiter's TTL at
-- most.
local function line_join(own, w, ttl)
	local line = own .. ":line"
	redis.call("ZADD", line, "NX", 0, w)
	redis.call("SET", own .. ":w:" .. w, "1", "PX", ttl)
	if redis.call("PTTL", line) < ttl then
		redis.call("PEXPIRE", line, ttl)
	end
end

-- line_leave takes waiter w out of the line of the lock own.
local function line_leave(own, w)
	if redis.call("ZREM", own .. ":line", w) == 1 then
		redis.call("DEL", own .. ":w:" .. w)
	end
end

-- line_hand keeps the free lock own for the first live waiter in its line
-- (or, given before, the first ahead of that name), for hand_over_ms (the
-- hand-over window, backends.HandOver, defined in front of this file), after
-- dropping the dead ones before it (at most 16 a call), and returns that
-- waiter, or nil. The waiter's liveness is cut to the window: one that
-- lets it lapse (slow, or dead) counts again only from its next attempt,
-- at its old place, so that a dead waiter costs the others one window,
-- not one per release for its TTL.
local function line_hand(own, before)
	local line = own .. ":line"
	local names
	if before then
		names = redis.call("ZRANGEBYLEX", line, "-", "(" .. before, "LIMIT", 0, 16)
	else
		names = redis.call("ZRANGE", line, 0, 15)
	end
	for _, w in ipairs(names) do
		local live = own .. ":w:" .. w
		local ttl = redis.call("PTTL", live)
		if ttl ~= -2 then
			redis.call("SET", own, "\r" .. w, "PX", hand_over_ms)
			if ttl < 0 or ttl > hand_over_ms then
				redis.call("PEXPIRE", live, hand_over_ms)
			end
			return w
		end
		redis.call("ZREM", line, w)
	end
	return nil
end
