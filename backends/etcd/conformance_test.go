package etcd_test

import (
	"context"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
)

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, nil)
	backendtest.Run(t, backendtest.Harness{
		NewBackend: func(t testing.TB) *dsync.Backend {
			b, err := dsync.Open(context.Background(), c.URL())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		ShortTTL: c.MinLeaseTTL(),
		URL:      c.URL(),
	})
}
