package etcdtest

import (
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
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

// settleTimeout is how long VerifyTestMain lets goroutines end.
const settleTimeout = 10 * time.Second

// VerifyTestMain runs a package's tests and then fails the run if
// goroutines are left, like goleak.VerifyTestMain, but gives them up to
// 10 s to end instead of goleak's one second or so: when a member is
// stopped while others still run, etcd's peer connections between them
// (rafthttp over net/http) end only when etcd's connection read timeout
// (5 s) expires. Nothing is ignored; goroutines still there after 10 s are
// reported as leaks.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(settleTimeout)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}
