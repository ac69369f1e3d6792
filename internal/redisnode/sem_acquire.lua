-- sem_acquire.lua: one attempt to obtain one of the slots of a semaphore
-- (size > 1). Runs after fence.lua and sem_common.lua.
--
-- KEYS[1]  the holders              P{K}
-- KEYS[2]  the fence counter        P fence:{T}, T in K's slot
-- KEYS[3]  the holders' values      P{K}:values
-- ARGV[1]  the token
-- ARGV[2]  time to live, in ms
-- ARGV[3]  "1" to draw a fencing token, "0" not to
-- ARGV[4]  the size
-- ARGV[5]  the hold's value, "" for none
--
-- Returns 0 when every slot is taken (or the token holds one already); -M
-- when the live holders have size M other than ARGV[4] (-1: a lock holds
-- the key); otherwise the new fence counter when one was asked for, or 1.
local size = tonumber(ARGV[4])
-- ZCARD tells a free key (0) from a semaphore, and fails on a lock (which
-- only a misconfiguration puts there): no TYPE on the way of a semaphore.
local n = redis.pcall("ZCARD", KEYS[1])
if type(n) == "table" then
	if redis.call("TYPE", KEYS[1]).ok == "string" then
		return -1
	end
	return n
end
local now = sem_now()
local exp = now + tonumber(ARGV[2])
local has = false
local fresh = true
if n > 0 then
	local gone
	has, gone = sem_prune(KEYS[1], KEYS[3], now)
	n = n - gone - 1 -- live holders, without the size
	if n > 0 then
		local s = redis.call("ZSCORE", KEYS[1], "")
		if not s then
			return redis.error_reply("ERR dsync: " .. KEYS[1] .. " is a sorted set without a semaphore size")
		end
		s = -tonumber(s)
		if s ~= size then
			return -s
		end
		if n >= size or redis.call("ZADD", KEYS[1], "NX", exp, ARGV[1]) == 0 then
			return 0
		end
		fresh = false
	end
end
if fresh then
	-- No live holder: (re)write the size with the first hold.
	redis.call("ZADD", KEYS[1], -size, "", exp, ARGV[1])
end
if ARGV[5] ~= "" then
	redis.call("HSET", KEYS[3], ARGV[1], ARGV[5])
	has = true
end
if fresh then
	redis.call("PEXPIREAT", KEYS[1], exp)
	if has then
		redis.call("PEXPIREAT", KEYS[3], exp)
	end
else
	sem_settle(KEYS[1], KEYS[3], has)
end
if ARGV[3] == "1" then
	return fence_draw(KEYS[2], 1)
end
return 1
