package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, nil)
	backendtest.Run(t, backendtest.Harness{
		NewBackend: func(t testing.TB) *dsync.Backend {
			b, err := dsync.Open(context.Background(), srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		ShortTTL: 200 * time.Millisecond,
		URL:      srv.URL(),
	})
}
