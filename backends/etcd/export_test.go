package etcd

// DisableLeaseReuse makes d grant a lease for every attempt and keep none,
// as the reference of BenchmarkLeaseReuse. Call it before any other use.
func DisableLeaseReuse(d *Driver) { d.pool.off = true }
