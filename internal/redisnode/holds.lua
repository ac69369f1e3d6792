-- holds.lua: every live hold of a key on a Redlock node, lock or slots.
--
-- KEYS[1]  the lock's hold, or the semaphore's marker   P{K}
--
-- Returns {} when K is not held (a lock kept for a waiter is not held);
-- {1, -1, hold, pttl} for a lock; for a semaphore of limit N, {N, I,
-- hold, pttl, J, hold, pttl, ...} over its live slots P{K}:slot:I, where
-- hold is as stored (see hold.lua) and pttl the remaining time to live in
-- ms.
local m = redis.call("GET", KEYS[1])
if not m or string.sub(m, 1, 1) == "\r" then
	return {}
end
if string.sub(m, 1, 1) ~= "\n" then
	return {1, -1, m, redis.call("PTTL", KEYS[1])}
end
local n = tonumber(string.sub(m, 2))
local out = {n}
for i = 0, n - 1 do
	local k = KEYS[1] .. ":slot:" .. i
	local v = redis.call("GET", k)
	if v then
		table.insert(out, i)
		table.insert(out, v)
		table.insert(out, redis.call("PTTL", k))
	end
end
return out
