package etcd

// DisableLeaseReuse makes d grant a lease for every attempt and keep none,
// as the reference of BenchmarkLeaseReuse. Call it before any other use.
func DisableLeaseReuse(d *Driver) { d.pool.off = true }

// RenewWithKeepAliveOnce makes d renew leases with clientv3's
// KeepAliveOnce, a stream per renewal, as the reference of
// BenchmarkKeepAliveStream. Call it before any other use.
func RenewWithKeepAliveOnce(d *Driver) { d.renew.once = true }

// LinePrefix is the prefix of the line of waiters of the lock whose etcd
// key is lk.
func LinePrefix(lk string) string { return linePrefix(lk) }

// AfterLook makes f run between a waiter's look at its line and its
// registration with d's release watch. Call it before any other use.
func AfterLook(d *Driver, f func()) { d.afterLook = f }

// LineDeletionsSeen is how many deletions of keys in key's line d's
// release watch has seen (since its log last started), and whether the
// watch is created.
func LineDeletionsSeen(d *Driver, key string) (n int, created bool) {
	lk, err := d.Key(key)
	if err != nil {
		return 0, false
	}
	w := d.notify.watchOf(lk)
	if w == nil {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dels), w.delsFrom != 0
}
