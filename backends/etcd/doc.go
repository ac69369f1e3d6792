// Package etcd is the etcd driver for dsync: locks and counting semaphores
// on an etcd cluster. Register its etcd:// and etcds:// schemes with a blank
// import and open it by URL (etcd://user:pass@h1:2379,h2:2379/prefix?ttl=30s),
// or wrap a clientv3 client of your own with New.
//
// A hold is a key bound to a lease of its own, created by one transaction.
// The fencing token is the key's create revision: strictly greater than
// that of every earlier hold on the key, cluster-wide, for as long as the
// cluster keeps its data. A lock named N is the key prefix+N, with "%" and
// "/" escaped; a semaphore of Size permits keeps one key per holder below
// prefix+N+"/", and its holders are the first Size keys by create revision.
// A lock and a semaphore of one name exclude each other.
//
// The blocking waiters of a lock are served strictly in the order of
// their calls, across processes: a refused waiter keeps a key in the
// lock's line on a lease its attempts renew, and only the head may take
// the lock (TryAcquire only when nobody waits). See docs/etcd.md.
//
// TTLs are whole seconds, rounded up, and etcd raises them to its minimum
// (2 s with its default timing); Grant.TTL is the TTL the server applied.
// Refresh renews the lease and never re-creates a hold; Release deletes the
// key in a transaction guarded by its create revision, so a stale release
// never touches a newer hold. Every answer about a hold comes from etcd.
//
// Every method makes one attempt and blocks for at most a few round trips,
// bounded by its context and by Options.RequestTimeout (URL option
// request_timeout, default 5 s); Open also waits for the cluster, bounded by
// dial_timeout (default 5 s) or the context, whichever ends first. Requests
// etcd refuses for good (too large, permission denied) match
// backends.ErrInvalid. WatchReleases watches the key's deletions.
//
// After Close, holds and the driver's idle leases (at most 64, holding no
// key) are left on the server until their leases expire; a client passed to
// New stays open. The design and its reasoning are in docs/etcd.md.
package etcd
