-- sem_common.lua: the semaphore helpers, put by the driver in front of
-- sem_acquire.lua, release.lua, refresh.lua and holder.lua.
--
-- A semaphore of size N on key K is the sorted set P{K}: each holder's
-- token scored by the expiry of its hold in ms of the server's clock (TIME,
-- never the client's), plus the member "" (no token is empty) scored -N,
-- which keeps the size with the holders. Holders' values, when there are
-- any, are in the hash P{K}:values, field = token. Both keys expire
-- (PEXPIREAT) at the latest hold's score, so an abandoned semaphore
-- disappears on its own.
--
-- A hold is live while now <= its score, as a key is live while now <= its
-- expiry time: the set exists exactly while one of its holds is live.

-- sem_now returns the server's clock in ms.
local function sem_now()
	local t = redis.call("TIME")
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- sem_prune removes the holds that expired before now, and their values.
-- It returns whether the values hash exists, and how many holds it removed.
local function sem_prune(k, kv, now)
	local before = "(" .. string.format("%d", now)
	local has = redis.call("EXISTS", kv) == 1
	if has then
		local gone = redis.call("ZRANGEBYSCORE", k, 0, before)
		for i = 1, #gone, 1000 do
			redis.call("HDEL", kv, unpack(gone, i, math.min(i + 999, #gone)))
		end
	end
	return has, redis.call("ZREMRANGEBYSCORE", k, 0, before)
end

-- sem_settle sets the expiry of the set (and of the values hash, if has) to
-- its latest hold's score, or deletes both when no hold is left.
local function sem_settle(k, kv, has)
	local top = redis.call("ZRANGE", k, -1, -1, "WITHSCORES")
	if top[1] == nil or top[1] == "" then
		redis.call("DEL", k, kv)
		return
	end
	redis.call("PEXPIREAT", k, top[2])
	if has then
		redis.call("PEXPIREAT", kv, top[2])
	end
end

