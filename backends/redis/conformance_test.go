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
	opener := func(url string) func(testing.TB) *dsync.Backend {
		return func(t testing.TB) *dsync.Backend {
			b, err := dsync.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	down := redistest.Start(t, nil) // for the outage
	backendtest.Run(t, backendtest.Harness{
		NewBackend: opener(srv.URL()),
		ShortTTL:   200 * time.Millisecond,
		URL:        srv.URL(),
		Outages: []backendtest.Outage{{
			Name:       "server stopped",
			NewBackend: opener(down.URL()),
			Cut: func(t testing.TB) {
				if err := down.Stop(); err != nil {
					t.Fatal(err)
				}
			},
		}},
	})
}
