// Package etcd is the etcd driver for dsync: locks and counting semaphores
// on an etcd cluster, each hold a key bound to its own lease, taken in one
// transaction and fenced by the key's create revision, with release notices
// from a watch.
//
// Applications either open it by URL, after a blank import that registers
// the etcd:// and etcds:// schemes:
//
//	import _ "github.com/dsync-dev/dsync/backends/etcd"
//
//	b, err := dsync.Open(ctx, "etcd://user:password@10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp?ttl=30s")
//
// or hand it a clientv3 client they already have, with New, and wrap the
// driver with dsync.NewBackend. The URL's path is the key prefix (default
// "dsync/"); a host without a port gets 2379. etcds:// connects over TLS
// (options ca_file, cert_file, key_file, skip_verify); the userinfo is
// etcd's user name and password. Opening probes the cluster with a lease
// grant within the context (or dial_timeout, 5 s): an unreachable cluster,
// bad credentials or a TLS mismatch fail there, with an error that names the
// endpoints and the last connection error, never the password. The grant
// also tells the cluster's minimum lease TTL, which Capabilities reports.
//
// # Guarantees
//
//   - Mutual exclusion is etcd's: a hold is created by a transaction that
//     the cluster's raft log orders, so it survives the loss of a minority
//     of members, leader changes included. Without a majority, calls fail
//     within their context (nothing is granted); a held lock is then lost
//     when its local validity runs out.
//   - The fencing token is the key's create revision: the cluster-wide
//     revision of the transaction that created the hold. It is strictly
//     greater than every earlier hold's token on the same key (and on every
//     other key), for as long as the cluster keeps its data; it does not
//     depend on this client or on a per-key counter. A resource stored in
//     etcd can check it in the same transaction as its write (see the
//     example); any other resource must remember the largest token it saw.
//   - Expiry is etcd's lease expiry, measured by the leader's monotonic
//     clock; a new leader gives every lease a full TTL (its remaining TTL
//     if the cluster checkpoints leases) plus an election timeout when it
//     takes over, and expired leases are revoked within about 500 ms. A dead holder's lock is therefore free after its TTL, plus an
//     election if the leader died too, plus that delay.
//   - TTLs are whole seconds, rounded up, and raised by the cluster to its
//     minimum (1.5 election timeouts rounded up: 2 s with etcd's default
//     timing). Grant.TTL, and so the lease's TTL and validity, is the value
//     the cluster granted, counted from the attempt's start; on an idle
//     lease that was renewed within the last 1% of its TTL, it is what is
//     left of the lease from the attempt's start (at most 1% short, and at
//     least a second). A lease keeps the TTL it was granted with: Refresh
//     with a longer TTL is refused.
//   - A semaphore never has more than Size live holders: the holders are the
//     first Size keys of the semaphore by create revision, as one
//     transaction reads them, and a key's rank can only improve (keys are
//     created with ever larger revisions; deletions only move keys up).
//     Fencing tokens are create revisions too, so they grow over every
//     permit of the semaphore (and every other hold).
//   - Release notices (WatchReleases) come from a watch of the key's
//     deletion (for a semaphore, of its permits') and are hints. The layer
//     above never relies on them.
//
// # Holds and leases
//
// With the prefix P (Options.Prefix, always ending in "/") and a lock named
// N, the hold is the key P+E(N), where E escapes "%" as "%25" and "/" as
// "%2F": a name is one path segment, so no name nests under another and the
// keys below P+E(N)+"/" are free for the semaphore of that name (see
// Semaphores). Its value is the hold's token, a newline, and the request's
// value.
//
// Acquire takes a lease and runs one transaction: if the key's create
// revision is 0 (the key does not exist), and no permit of a semaphore N
// exists, put it with the lease. The lease is either granted for the
// attempt or one of the driver's idle leases. A lease is idle when it holds
// no key: its attempt lost the race, or its hold was released. Reusing it
// saves a raft write (the grant) per acquisition, and a lost race leaves no
// lease behind to revoke. Each hold still has a lease of its own while it
// lasts; a driver keeps at most 64 idle leases, which expire on their own
// after Close. An idle lease is renewed, on a stream the driver keeps open
// and in parallel with the transaction, unless it was renewed (or granted)
// within the last 1% of its TTL: in a busy driver, where a lease goes from
// hold to hold, that is one renewal per 1% of the TTL instead of one per
// acquisition, and Grant.TTL says what is left of the lease instead of the
// full TTL. Either way the hold lives at least Grant.TTL from the start of
// the attempt, which is where validity is counted from.
//
// Refresh renews the hold's lease and then reads the key, and reports
// ErrNotHeld unless the key is still the hold's (same create revision, same
// lease): it never re-creates a hold. Release is one transaction that
// deletes the key if its create revision is the hold's, so a stale or
// retried release cannot delete a newer hold of the key (etcd's own
// concurrency.Mutex.Unlock deletes by name). Neither revokes a lease: a
// lease seen through a stale read may already serve another hold.
//
// # Semaphores
//
// A semaphore named N of Size permits (Request.Limit > 1) keeps its permits
// below P+E(N)+"/", the prefix that no lock key can be under. Each permit
// is a key of its own, bound to its own lease and named after it (in hex);
// its value is the permit's token, Size and the request's value, each on a
// line. An attempt takes a lease as a lock's does and runs one transaction:
// unless the lock key P+E(N) exists, put the permit's key, and read the
// first Size keys of the prefix by create revision (a transaction's reads
// see its writes). The permit is granted if its key is among them and they
// all record the same Size. Otherwise a second transaction deletes the key,
// so that a try that gets no permit leaves nothing behind, and the attempt
// returns ErrNotAcquired, or the error of backends.LimitMismatch when the
// holders it saw record another Size. A free permit therefore costs what a
// lock costs (two raft writes with its release); a try on a full semaphore
// costs two writes, or none when the driver's own permits fill it.
//
// A lock and a semaphore of one name exclude each other: the lock's
// transaction also requires that no key exist below the prefix, and the
// permit's that the lock key not exist. Either attempt fails with the error
// of LimitMismatch (a lock has size 1).
//
// Refresh and Release find a permit from the name and the token (the
// driver's table, or one read of the lock key and the prefix), and act on
// that key only, guarded by its create revision as a lock's release is: a
// stale release never touches another holder. Grant.Key is not used.
// Holder reports the permit whose lease expires last, reading the holders'
// TTLs in parallel.
//
// Naming permits after leases, which the driver reuses, keeps the number of
// key names below a prefix small: etcd keeps a deleted key in its index
// until the next compaction, and every attempt reads the prefix, so a name
// per attempt would make attempts slower and slower between compactions
// (a cluster should compact regularly all the same, as every etcd
// deployment must). A semaphore's size is bounded by MaxSemaphoreSize,
// since every attempt reads its holders.
//
// A watch of a semaphore's releases sees the deletions of permit keys,
// including those of tries that got no permit. Once an attempt of the
// driver has found the semaphore full, only the deletion of one of the
// holders it saw wakes the driver's waiters, so that the tries of many
// waiting processes do not wake each other in turn.
//
// The driver remembers each hold it took (its lease and create revision)
// so that Refresh and Release cost one round trip less; a hold it does not
// know, taken by another driver or forgotten, is read from the server. The
// table forgets holds when they are released or found gone, and holds whose
// lease must have expired, in sweeps amortized over insertions: it cannot
// grow beyond the holds of the last TTL or so.
//
// # One attempt per call
//
// Each method makes one attempt, as the dsync driver SPI requires. clientv3
// retries a call only when that is safe: reads, and writes that never left
// the client. The watch and the renewal stream reconnect on their own,
// owned by the driver and stopped by Close.
package etcd
