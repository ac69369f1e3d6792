-- hold.lua: the helpers of the scripts that meet a lock's or a slot's
-- hold, put in front of them.
--
-- A lock's hold P{K}, and a slot's hold P{K}:slot:I, is a string: the
-- token; then, for a hold that drew a fencing token, "\t" and that token
-- in decimal; then, for a hold with a value, "\n" and the value. While a
-- Redlock semaphore of N slots
-- holds any slot, the key of its lock, P{K}, holds the marker "\n" .. N
-- and lives at least as long as every slot (no hold starts with "\n":
-- tokens are not empty). On a single server, a semaphore of size N is
-- the sorted set P{K} instead (see sem_common.lua).
--
-- hold_owned reports whether the hold v belongs to token.
local function hold_owned(v, token)
	local c = string.sub(v, #token + 1, #token + 1)
	return string.sub(v, 1, #token) == token and (c == "" or c == "\t" or c == "\n")
end

-- hold_fence returns the hold v with its fencing token set to n, a string
-- of decimal digits.
local function hold_fence(v, n)
	local i = string.find(v, "[\t\n]")
	if not i then
		return v .. "\t" .. n
	end
	local rest = string.sub(v, i)
	if string.sub(rest, 1, 1) == "\t" then
		local j = string.find(rest, "\n", 1, true)
		rest = j and string.sub(rest, j) or ""
	end
	return string.sub(v, 1, i - 1) .. "\t" .. n .. rest
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
