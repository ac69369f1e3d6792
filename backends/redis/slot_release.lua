-- slot_release.lua: compare-and-delete of a slot, then the semaphore's
-- marker is cut to the slots that are left, and waiters are told.
--
-- KEYS[1]  the slot's hold          P{K}:slot:I
-- KEYS[2]  the semaphore's marker   P{K}
-- ARGV[1]  the token
-- ARGV[2]  "0" to withdraw a failed attempt without telling waiters;
--          otherwise publish on P{K}:released, the channel of K's lock,
--          to which every waiter of K listens
--
-- The other slots are P{K}:slot:0 .. P{K}:slot:N-1, N read from the marker
-- (they share K's hash tag; they are not declared in KEYS because their
-- number is not known before the marker is read). The marker expires with
-- the last slot, or goes now when no slot is left, so that neither a
-- released semaphore nor a withdrawn attempt leaves its limit behind.
--
-- Returns 1 when the slot was this token's and is now gone, 0 otherwise.
local v = redis.call("GET", KEYS[1])
if not (v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n")) then
	return 0
end
redis.call("DEL", KEYS[1])
local m = redis.call("GET", KEYS[2])
if m and string.sub(m, 1, 1) == "\n" then
	local keep = 0
	for i = 0, tonumber(string.sub(m, 2)) - 1 do
		local t = redis.call("PTTL", KEYS[2] .. ":slot:" .. i)
		if t > keep then
			keep = t
		end
	end
	if keep > 0 then
		redis.call("PEXPIRE", KEYS[2], keep)
	else
		redis.call("DEL", KEYS[2])
	end
end
if ARGV[2] ~= "0" then
	redis.call("PUBLISH", KEYS[2] .. ":released", "released")
end
return 1
