package etcdtest

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Start starts a cluster like StartServer, in t.TempDir(), and registers its
// Close with t.Cleanup. On failure it calls t.Fatalf.
func Start(t testing.TB, opts *Options) *Cluster {
	t.Helper()
	c, err := start(t.Context(), opts, t.TempDir(), false)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

// Client returns a client of every member of c, closed by t.Cleanup before
// c is (cleanups run last-registered first).
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := c.NewClient()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
