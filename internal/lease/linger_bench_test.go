package lease

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	_ "github.com/dsync-dev/dsync/redlock"
)

// BenchmarkLinger: 8 separate clients (backends) take one Redlock lock
// over and over, on 5 masters, with a key's release notices kept for
// lingerFor after each line ends ("kept", as shipped) and closed at once
// ("closed"), in interleaved blocks of acquisitions. It reports each
// variant's time per block, the ratio closed/kept, and attempts per
// acquisition. linger.go stays only while closed/kept is at least 1.10.
func BenchmarkLinger(b *testing.B) {
	servers := redistest.StartN(b, 5, nil)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	url := "redlock://" + strings.Join(addrs, ",") + "/?max_ttl=2s&node_timeout=300ms"
	awaitVoters(b, url)
	const block = 80 // acquisitions per run of a variant
	kept := newContenders(b, url, "linger-kept", maxIdle)
	closed := newContenders(b, url, "linger-closed", 0)
	res := interleave.Run(b, &interleave.Options{Warm: 3},
		interleave.Case{Name: "kept", Run: func() { kept.run(b, block) }},
		interleave.Case{Name: "closed", Run: func() { closed.run(b, block) }})
	b.ReportMetric(float64(res["closed"].Median)/float64(res["kept"].Median), "closed/kept")
	b.ReportMetric(kept.attemptsPer(), "kept-attempts/acq")
	b.ReportMetric(closed.attemptsPer(), "closed-attempts/acq")
}

// contenders are 8 backends of their own contending for one lock, whose
// lines keep at most keep idle subscriptions.
type contenders struct {
	cfgs     []*Config
	counters []*attemptCount
	acquired atomic.Int64
}

func newContenders(b *testing.B, url, key string, keep int) *contenders {
	c := &contenders{}
	for range 8 {
		opened, err := dsync.Open(b.Context(), url)
		if err != nil {
			b.Fatal(err)
		}
		counted := &attemptCount{Driver: Driver(opened)}
		be, err := dsync.NewBackend(counted, nil) // owns opened's driver
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		State(be, linesKey{}, func() *lines { return newLines(keep) })
		cfg, err := New(be, Lock, key, 1, &Options{TTL: 2 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.counters = append(c.counters, counted)
	}
	return c
}

// run has the contenders acquire the lock n times in all, each holding it
// for 100µs.
func (c *contenders) run(b *testing.B, n int) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for _, cfg := range c.cfgs {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				l, err := cfg.Acquire(b.Context(), nil)
				if err != nil {
					b.Error(err)
					return
				}
				c.acquired.Add(1)
				time.Sleep(100 * time.Microsecond) // the work under the lock
				// A release that failed (a loaded machine timing out a
				// node) leaves the hold to expire: slower, not wrong.
				_ = l.Release(context.Background())
			}
		})
	}
	wg.Wait()
}

// attemptsPer is the attempts made per acquisition so far.
func (c *contenders) attemptsPer() float64 {
	var n int64
	for _, a := range c.counters {
		n += a.n.Load()
	}
	return float64(n) / float64(max(c.acquired.Load(), 1))
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
