package etcd

import (
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// CheckTTL implements backends.Driver: the TTL rules of Capabilities.
func (d *driver) CheckTTL(ttl time.Duration) error { return backends.CheckTTL(ttl, d.Capabilities()) }
