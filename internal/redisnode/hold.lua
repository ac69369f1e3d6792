-- hold.lua: the helpers of the scripts that meet a lock's or a slot's
-- hold, put in front of them.
--
-- A lock's hold P{K}, and a slot's hold P{K}:slot:I, is a string: the
-- token, or token .. "\n" .. value. While a Redlock semaphore of N slots
-- holds any slot, the key of its lock, P{K}, holds the marker "\n" .. N
-- and lives at least as long as every slot (no hold starts with "\n":
-- tokens are not empty). On a single server, a semaphore of size N is
-- the sorted set P{K} instead (see sem_common.lua).
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

-- hold_owned reports whether the hold v belongs to token.
local function hold_owned(v, token)
	return v == token or string.sub(v, 1, #token + 1) == token .. "\n"
end

-- held_limit returns the limit of the holds on P{K} = k: nil when it is
-- free (or not ours), 1 for a lock (or a reservation), N for a semaphore
-- of N slots or of size N; and, for a string, its value.
local function held_limit(k)
	local v = redis.pcall("GET", k)
	if type(v) == "table" then
		if redis.call("TYPE", k).ok ~= "zset" then
			return nil
		end
		local s = redis.call("ZSCORE", k, "")
		return s and -tonumber(s)
	end
	if not v then
		return nil
	end
	if string.sub(v, 1, 1) == "\n" then
		return tonumber(string.sub(v, 2))
	end
	return 1, v
end

-- marker_stretch makes the semaphore marker mk live at least ttl ms.
local function marker_stretch(mk, ttl)
	local m = redis.call("GET", mk)
	if m and string.sub(m, 1, 1) == "\n" and redis.call("PTTL", mk) < ttl then
		redis.call("PEXPIRE", mk, ttl)
	end
end

-- marker_trim cuts the semaphore marker mk to the life of its slots
-- mk:slot:0 .. mk:slot:N-1, deleting it with the last one, so that a
-- semaphore leaves its limit behind no longer than its holds. (The slots
-- share mk's hash tag; their number is known only once mk is read.)
local function marker_trim(mk)
	local m = redis.call("GET", mk)
	if not (m and string.sub(m, 1, 1) == "\n") then
		return
	end
	local keep = 0
	for i = 0, tonumber(string.sub(m, 2)) - 1 do
		keep = math.max(keep, redis.call("PTTL", mk .. ":slot:" .. i))
	end
	if keep > 0 then
		redis.call("PEXPIRE", mk, keep)
	else
		redis.call("DEL", mk)
	end
end

-- line_join puts waiter w in the line of the lock own, or keeps its place
-- there, for ttl ms; the line lives at least as long.
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
-- (or, given before, the first ahead of that name), for window ms, after
-- dropping the dead ones before it (at most 16 a call), and returns that
-- waiter, or nil. The waiter's liveness is cut to the window: one that
-- lets it lapse (slow, or dead) counts again only from its next attempt,
-- at its old place, so that a dead waiter costs the others one window,
-- not one per release for its TTL.
local function line_hand(own, window, before)
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
			redis.call("SET", own, "\r" .. w, "PX", window)
			if ttl < 0 or ttl > window then
				redis.call("PEXPIRE", live, window)
			end
			return w
		end
		redis.call("ZREM", line, w)
	end
	return nil
end
