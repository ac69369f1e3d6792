package lease

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	_ "github.com/dsync-dev/dsync/redlock"
)

// BenchmarkLinger: 8 separate clients (backends) take one Redlock lock
// over and over, on 3 masters, with a key's release notices kept for
// lingerFor after each line ends ("kept", as shipped) and closed at once
// ("closed"). Each op is one acquisition; attempts/op counts every
// attempt. linger.go stays only while "kept" wins at least 10% here.
func BenchmarkLinger(b *testing.B) {
	servers := redistest.StartN(b, 3, nil)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	url := "redlock://" + strings.Join(addrs, ",") + "/?max_ttl=2s&node_timeout=300ms"
	awaitVoters(b, url)
	for _, v := range []struct {
		name string
		keep int
	}{{"kept", maxIdle}, {"closed", 0}} {
		b.Run(v.name, func(b *testing.B) { benchSeparateClients(b, url, v.keep) })
	}
}

// benchSeparateClients runs b.N acquisitions of one lock by 8 backends of
// their own, whose lines keep at most keep idle subscriptions.
func benchSeparateClients(b *testing.B, url string, keep int) {
	const clients = 8
	key := "linger-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var left atomic.Int64
	left.Store(int64(b.N))
	cfgs := make([]*Config, clients)
	counters := make([]*attemptCount, clients)
	for i := range cfgs {
		opened, err := dsync.Open(b.Context(), url)
		if err != nil {
			b.Fatal(err)
		}
		counters[i] = &attemptCount{Driver: opened.Driver()}
		be, err := dsync.NewBackend(counters[i], nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		be.State(linesKey{}, func() any { return newLines(keep) })
		if cfgs[i], err = New(be, Lock, key, 1, &Options{TTL: 2 * time.Second}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := b.Context()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range cfgs {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				l, err := c.Acquire(ctx, nil)
				if err != nil {
					b.Error(err)
					return
				}
				time.Sleep(100 * time.Microsecond) // the work under the lock
				// A release that failed (a loaded machine timing out a
				// node) leaves the hold to expire: slower, not wrong.
				_ = l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	attempts := 0
	for _, c := range counters {
		attempts += int(c.n.Load())
	}
	b.ReportMetric(float64(attempts)/float64(b.N), "attempts/op")
}

// attemptCount counts a driver's acquisition attempts.
type attemptCount struct {
	backends.Driver
	n atomic.Int64
}

func (a *attemptCount) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	a.n.Add(1)
	return a.Driver.Acquire(ctx, req)
}

// awaitVoters waits until every master of the redlock:// url votes (a
// fresh server is quarantined for the URL's max_ttl).
func awaitVoters(b *testing.B, url string) {
	be, err := dsync.Open(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := be.Health(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		voting := 0
		for _, n := range h.Nodes {
			if n.Reachable && n.QuarantinedUntil.IsZero() {
				voting++
			}
		}
		if voting == len(h.Nodes) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("masters still quarantined after 30s: %+v", h)
		}
		time.Sleep(100 * time.Millisecond) // a clock to wait out
	}
}
