package memory

import (
	"context"

	"github.com/dsync-dev/dsync/backends"
)

// Health implements backends.Driver: a store in process memory can always
// serve, so the report is OK with one node named "memory". It returns
// ctx's error if ctx is done, and ErrClosed after Close.
func (d *driver) Health(ctx context.Context) (backends.Health, error) {
	if _, err := d.begin(ctx); err != nil {
		return backends.Health{}, err
	}
	d.store.mu.Unlock()
	return backends.Health{OK: true, Nodes: []backends.NodeHealth{{Addr: "memory", Reachable: true}}}, nil
}
