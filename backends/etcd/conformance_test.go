package etcd_test

import (
	"context"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
)

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, nil)
	opener := func(url string) func(testing.TB) *dsync.Backend {
		return func(t testing.TB) *dsync.Backend {
			b, err := dsync.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	// For the outages: a cluster behind a proxy that black-holes the link,
	// and a cluster of 3 that loses 2 members, so that the one left answers
	// but cannot decide. A short request timeout bounds the wait for an
	// answer that never comes.
	holed := etcdtest.Start(t, nil)
	proxy := faultproxy.Start(t, holed.Endpoint(0))
	stopped := etcdtest.Start(t, &etcdtest.Options{Members: 3})
	backendtest.Run(t, backendtest.Harness{
		NewBackend: opener(c.URL()),
		ShortTTL:   c.MinLeaseTTL(),
		URL:        c.URL(),
		Outages: []backendtest.Outage{{
			Name:       "link black-holed",
			NewBackend: opener("etcd://" + proxy.Addr() + "?request_timeout=1s"),
			Cut: func(t testing.TB) {
				if err := proxy.Blackhole(); err != nil {
					t.Fatal(err)
				}
			},
		}, {
			Name:       "2 of 3 members stopped",
			NewBackend: opener(stopped.URL() + "?request_timeout=1s"),
			Cut: func(testing.TB) {
				stopped.Stop(0)
				stopped.Stop(1)
			},
		}},
	})
}
