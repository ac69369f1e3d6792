package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Driver is the driver type, for the tests that drive the SPI directly.
type Driver = driver

// NewDriver returns a driver over client, as New does under its backend,
// for the tests that drive the SPI directly.
func NewDriver(client *clientv3.Client, opts *Options) (*Driver, error) {
	return newDriver(client, opts, false)
}

// Key returns the etcd key that holds the lock named name.
func (d *driver) Key(name string) (string, error) { return d.key(name) }

// Prefix returns the key prefix, always ending in "/".
func (d *driver) Prefix() string { return d.prefix }

// The lease pool's bounds, which BenchmarkLeaseReuse fills to make a
// driver that reuses no lease and remembers no hold.
const (
	MaxIdle = maxIdle
	MaxHeld = maxHeld
)

// PoolFull reports whether d's lease pool is at both its bounds: d then
// keeps no lease it is given back, and remembers no new hold.
func PoolFull(d *Driver) bool {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return d.pool.nIdle >= maxIdle && len(d.pool.held) >= maxHeld
}

// SendRenewal sends a renewal of lease id on d's keep-alive stream, as
// Refresh and Acquire do, and returns a function that waits for its
// answer.
func SendRenewal(ctx context.Context, d *Driver, id clientv3.LeaseID) func() error {
	wait := d.renew.send(ctx, id)
	return func() error {
		_, err := wait(ctx)
		return err
	}
}

// LinePrefix is the prefix of the line of waiters of the lock whose etcd
// key is lk.
func LinePrefix(lk string) string { return linePrefix(lk) }

// HeirSeen is the heir that d's release watch of key would name now, and
// whether the watch knows (it is created, and has read the lock's line).
func HeirSeen(d *Driver, key string) (heir string, known bool) {
	lk, err := d.Key(key)
	if err != nil {
		return "", false
	}
	w := d.notify.watchOf(lk)
	if w == nil {
		return "", false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lock.heir(), w.lock.known
}
