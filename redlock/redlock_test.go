package redlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/redlock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// redlockURL returns the redlock:// URL of servers with extra options.
func redlockURL(servers []*redistest.Server, query string) string {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	u := "redlock://" + strings.Join(addrs, ",")
	if query != "" {
		u += "/?" + query
	}
	return u
}

func open(t testing.TB, url string) *dsync.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := dsync.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	return b
}

// waitOutQuarantine blocks until the freshly started servers are older than
// maxTTL, so that their votes count.
func waitOutQuarantine(t testing.TB, servers []*redistest.Server, maxTTL time.Duration) {
	t.Helper()
	b := open(t, redlockURL(servers, "max_ttl="+maxTTL.String()))
	defer b.Close()
	d := lease.Driver(b).(*redlock.Driver)
	deadline := time.Now().Add(maxTTL + 5*time.Second)
	for {
		if err := d.QuarantineCheck(time.Now()); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("nodes still quarantined after %v: %v", maxTTL+5*time.Second, err)
		}
		time.Sleep(50 * time.Millisecond) // a clock to wait out, not a condition to poll faster
	}
}

func TestConformance(t *testing.T) {
	servers := redistest.StartN(t, 5, nil)
	// Two more sets of masters, for the outages, started at the same time
	// so that one wait brings all of them out of their quarantine.
	restarted, stopped := redistest.StartN(t, 5, nil), redistest.StartN(t, 5, nil)
	const maxTTL = 10 * time.Second
	for _, set := range [][]*redistest.Server{servers, restarted, stopped} {
		waitOutQuarantine(t, set, maxTTL)
	}
	url := redlockURL(servers, "max_ttl="+maxTTL.String())
	opener := func(url string) func(testing.TB) *dsync.Backend {
		return func(t testing.TB) *dsync.Backend { return open(t, url) }
	}
	backendtest.Run(t, backendtest.Harness{
		NewBackend: opener(url),
		ShortTTL:   300 * time.Millisecond,
		URL:        url,
		Outages: []backendtest.Outage{{
			// Restarted without persistence: the 3 masters lost the holds,
			// and they must not vote for maxTTL.
			Name:       "3 of 5 masters restarted, quarantined",
			NewBackend: opener(redlockURL(restarted, "max_ttl="+maxTTL.String())),
			Cut: func(t testing.TB) {
				ctx := testutil.Context(t)
				for _, s := range restarted[:3] {
					if err := s.Restart(ctx); err != nil {
						t.Fatal(err)
					}
				}
			},
		}, {
			Name:       "3 of 5 masters stopped",
			NewBackend: opener(redlockURL(stopped, "max_ttl="+maxTTL.String())),
			Cut: func(t testing.TB) {
				for _, s := range stopped[:3] {
					if err := s.Stop(); err != nil {
						t.Fatal(err)
					}
				}
			},
		}},
	})
}

func TestSchemeRegistered(t *testing.T) {
	backendtest.CheckScheme(t, "redlock", "addr", "max_ttl", "node_timeout", "quarantine", "prefix", "tls")
}

// TestWorkersExitWhenIdle: the goroutines that run node requests stay for
// the next request, and exit once none has come for their idle time (5 s),
// with the driver still open. Not parallel: it counts every such goroutine
// in the process, and the parallel tests' drivers have theirs.
func TestWorkersExitWhenIdle(t *testing.T) {
	servers := redistest.StartN(t, 5, nil)
	b := open(t, redlockURL(servers, "quarantine=false"))
	t.Cleanup(func() { _ = b.Close() })
	workers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "redlock.(*workers).work(")
	}
	if n := workers(); n != 0 {
		t.Fatalf("%d workers before any request", n)
	}
	d := lease.Driver(b).(*redlock.Driver)
	ctx := context.Background()
	// The per-node timeout of a 1s TTL is 50ms: the first round opens the
	// connections.
	req, _, _, err := acquireHeard(ctx, d, func() backends.Request {
		return backends.Request{Key: "idle", Token: rand.Text(), TTL: time.Second, Fence: true}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, req.Key, req.Token); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	n := workers()
	if n == 0 {
		t.Fatal("no worker left after a cycle: nothing to reuse")
	}
	for time.Since(done) < 4*time.Second {
		if m := workers(); m == 0 {
			t.Fatalf("%d workers gone %v after the last request, before their idle time", n, time.Since(done).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond) // a clock to wait out
	}
	deadline := done.Add(15 * time.Second)
	for workers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers left 15 s after the last request, with an idle time of 5 s", workers())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d workers, gone %v after the last request", n, time.Since(done).Round(100*time.Millisecond))
}

// TestWritesNothingToStderr: a master that is down is reported through
// errors only, at Open and on every call after: go-redis's process-wide
// logger, which prints each failed dial to stderr by default, is the
// application's, and dsync's clients give it nothing to print.
func TestWritesNothingToStderr(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var openErr, downErr error
	out := testutil.CaptureStderr(t, func() {
		var b *dsync.Backend
		b, openErr = dsync.Open(ctx, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3") // nobody listens
		if openErr == nil {
			_ = b.Close()
		}

		addrs := []string{servers[0].Addr(), servers[1].Addr(), "127.0.0.1:1"}
		b = open(t, "redlock://"+strings.Join(addrs, ",")+"/?quarantine=false")
		defer b.Close()
		d := lease.Driver(b)
		if err := servers[1].Kill(); err != nil {
			t.Fatal(err)
		}
		for i := range 30 { // more calls than a pool has connections
			_, downErr = d.Acquire(ctx, backends.Request{Key: "stderr", Token: fmt.Sprint("t", i), TTL: time.Second, Fence: true})
		}
	})
	if !errors.Is(openErr, redlock.ErrNoQuorum) {
		t.Errorf("Open with every master down: %v, want ErrNoQuorum", openErr)
	}
	if !errors.Is(downErr, redlock.ErrNoQuorum) {
		t.Errorf("Acquire with 2 of 3 masters down: %v, want ErrNoQuorum", downErr)
	}
	if out != "" {
		t.Errorf("written to stderr:\n%s", out)
	}
}
