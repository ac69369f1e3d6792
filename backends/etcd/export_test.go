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
