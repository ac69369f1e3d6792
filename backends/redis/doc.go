// Package redis is the single-instance Redis driver for dsync: locks and
// counting semaphores on one Redis server (or a Sentinel-managed primary,
// or a Redis Cluster), with fencing tokens and release notices over
// pub/sub.
//
// Applications either open it by URL, after a blank import that registers
// the redis:// and rediss:// schemes:
//
//	import _ "github.com/dsync-dev/dsync/backends/redis"
//
//	b, err := dsync.Open(ctx, "redis://:password@localhost:6379/0?prefix=myapp:")
//
// or hand it a go-redis client they already have, with New, and wrap the
// driver with dsync.NewBackend.
//
// # Guarantees
//
// Read these before choosing this backend; the Redlock backend (package
// redlock) exists because of the second one.
//
//   - Mutual exclusion holds while the one server keeps its data: this is
//     efficiency-grade locking (it stops two workers from doing the same
//     job twice in the normal case), not a correctness guarantee under
//     faults.
//   - Redis replication is asynchronous. If the primary fails over to a
//     replica (Sentinel, Cluster) before a hold reached it, or restarts
//     without persistence, the hold is gone and the lock can be granted
//     twice. Fencing tokens can repeat after such a failover.
//   - Expiry follows the server's wall clock, for locks (PX) and
//     semaphores alike (a semaphore's holders are scored with the server's
//     TIME, never a client's clock, so clients whose clocks disagree still
//     agree on who holds a permit). A server whose clock jumps forward
//     expires holds early; the layer above measures validity on the
//     client's monotonic clock and cannot see that.
//   - A semaphore admits at most its size of live holders, with the same
//     caveats as a lock: while the server keeps its data. Sizes go up to
//     4096. A key has one size at a time: while it has live holders, an
//     acquire with another size (a lock being size 1) fails with the error
//     of backends.LimitMismatch. Without fencing, a lock acquire that finds
//     the key taken makes a second round trip (TYPE) to tell a semaphore
//     from another lock; with fencing the script does it.
//   - Fencing tokens are strictly increasing per key while the server keeps
//     its data, and across a restart that lost it as long as the server's
//     clock reads later than when the lost tokens were drawn: a missing
//     counter starts at the server's clock in microseconds. Counters are
//     kept per Redis Cluster hash slot, shared by the keys of the slot
//     (see FenceKey), so that however many distinct keys are locked, at
//     most 16384 counters (about 70 bytes each) stay behind, per prefix.
//     Tokens are large numbers (around 1.8e15) whose order is all that
//     counts: they grow by more than one when other keys of the slot are
//     held in between.
//   - Release notices (WatchReleases) are hints: a notice can be missed (for
//     instance while the pub/sub connection reconnects) or arrive without a
//     release the waiter can use. Waiters keep retrying on their own schedule.
//
// # Storage layout
//
// With the key prefix P (Options.Prefix, "dsync:" by default) and a key K,
// the driver uses:
//
//	P{K}           string  a lock's hold: the token, or token + "\n" + value
//	                       when the request carries a value; expires after
//	                       the TTL
//	P{K}           zset    or a semaphore's holders: each token scored by
//	                       its expiry in ms on the server's clock, plus the
//	                       member "" scored minus the size; expires with the
//	                       latest holder, and is deleted with the last one
//	P{K}:values    hash    a semaphore's holders' values, token -> value,
//	                       written only for holders with a value; expires
//	                       and goes with the set
//	P fence:{T}    string  the fencing counter (INCR) of the key, shared by
//	                       its locks and semaphores and by every key in the
//	                       same hash slot (T: a three-character tag of that
//	                       slot; see FenceKey); never expires
//	P{K}:released  channel PUBLISHed to when a hold is released
//
// The braces are a Redis Cluster hash tag, so all of one key's Redis keys,
// its fence counter included, live in one slot and each script touches a
// single slot. Tokens must not
// contain "\n", since that separates the token from the value.
//
// Every operation is one Lua script, embedded in the package and run with
// EVALSHA, falling back to EVAL when the server's script cache was emptied
// (after a restart or SCRIPT FLUSH): acquire.lua for a lock, sem_acquire.lua
// for a semaphore, and release.lua, refresh.lua and holder.lua for both
// (release and refresh try a lock's GET, and ask the key's TYPE only when
// it fails; holder asks the TYPE first). The scripts that draw a fencing
// token start with the helper of fence.lua, and those that may meet a
// semaphore with the helpers of sem_common.lua. The one exception is a
// lock acquire without fencing, a plain SET NX PX. A semaphore's expired
// holders are pruned by every call that writes.
//
// # One attempt per call
//
// Each method makes one attempt, as the dsync driver SPI requires. A client
// the driver creates from a URL is built so: go-redis's own command retries
// are off unless the URL sets max_retries, and context deadlines bound every
// round trip (go-redis's ContextTimeoutEnabled). A client passed to New is
// used as configured; see New.
package redis
