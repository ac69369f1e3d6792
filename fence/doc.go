// Package fence makes a write to a resource conditional on a fencing token:
// a guard applies the write only if its token is at least the largest token
// the resource has accepted for that name, and records the token, in one
// atomic step with the write. A holder whose lease ran out (paused past its
// TTL, say) carries an older token than its successor, and its late write
// is refused with an error matching ErrStale, with nothing written.
//
// Tokens come from Lease.Token (a lock or a semaphore's permit) and
// Leadership.Term. One name's fence compares the tokens of one lock, one
// election or one permit slot of one backend; it must not mix tokens of
// different backends, or of different names. Token 0 (a lease without
// fencing) is refused: nothing can order it.
//
// Guards:
//
//   - SQL, for any database/sql driver (dialects Postgres and SQLite): the
//     caller's writes run in a transaction that first checks and advances
//     the name's row in a fence table. Tokens up to math.MaxInt64 (BIGINT),
//     which every dsync backend's tokens stay below.
//   - Redis, for any go-redis client: SET, DEL, HSET and the caller's own
//     Lua script, each run by one script after the check. Tokens of the
//     whole uint64 range.
//   - etcd, in package fence/etcdfence: a transaction whose If holds the
//     check, for the caller's Then.
//
// Every call makes one attempt (the SQL guard's transaction, the Redis
// guard's script, the etcd guard's transaction) and blocks for as long as
// the store takes, bounded by its context; nothing is retried and nothing
// runs in the background. What is left behind is one small record per
// name (a row, a key), kept for good: deleting it resets the fence.
// docs/fencing.md says when to fence and what to do when the resource
// cannot check a token.
package fence
