package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
)

// appClients returns a client of each server as an application makes
// them: with the server's password, go-redis's default retries, and an
// OnConnect hook that counts connections.
func appClients(t *testing.T, servers []*redistest.Server, password string, connects *atomic.Int32) []goredis.UniversalClient {
	t.Helper()
	var clients []goredis.UniversalClient
	for _, s := range servers {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: password,
			OnConnect: func(context.Context, *goredis.Conn) error { connects.Add(1); return nil }})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	return clients
}

// TestNewFromClients: a driver made from the application's clients takes
// their settings (here a password), locks on a quorum, keeps the restart
// quarantine, and leaves the clients open when closed.
func TestNewFromClients(t *testing.T) {
	const password = "s3cret"
	servers := redistest.StartN(t, 3, &redistest.Options{Password: password})
	var connects atomic.Int32
	clients := appClients(t, servers, password, &connects)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Freshly started masters are quarantined: the driver's own clients
	// read each server's uptime, as New's do.
	var d *redlock.Driver
	var err error
	out := testutil.CaptureStderr(t, func() { d, err = redlock.NewDriverFromClients(ctx, clients, nil) })
	if err != nil {
		t.Fatalf("NewFromClients: %v", err)
	}
	if n := connects.Load(); n < 3 {
		t.Errorf("the clients' OnConnect ran %d times for 3 masters probed, want it chained before dsync's", n)
	}
	if out != "" {
		t.Errorf("NewFromClients wrote to stderr (clients sharing go-redis state?):\n%s", out)
	}
	if err := d.QuarantineCheck(time.Now()); !errors.Is(err, redlock.ErrQuarantined) {
		t.Errorf("QuarantineCheck on masters started just now: %v, want ErrQuarantined", err)
	}
	if got, want := d.Nodes(), []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Nodes() = %v, want %v", got, want)
	}
	_ = d.Close()

	d, err = redlock.NewDriverFromClients(ctx, clients, &redlock.Options{NoQuarantine: true})
	if err != nil {
		t.Fatalf("NewFromClients: %v", err)
	}
	b, err := dsync.NewBackend(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := locker.New(b, "from-clients", &locker.Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	// The round returned at a quorum; the third master's request may land
	// later, and a won round keeps it.
	for i, c := range clients {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the hold on master %d", i), func() bool {
			v, err := c.Get(ctx, "dsync:{from-clients}").Result()
			return err == nil && v != ""
		})
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Errorf("the application's client %d after the driver closed: %v", i, err)
		}
	}
}

// TestNewFromClientsRefuses: a client that is not one server, or none, is
// an *InvalidError naming it, before any I/O.
func TestNewFromClientsRefuses(t *testing.T) {
	srv := redistest.Start(t, nil)
	plain := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer plain.Close()
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	defer cluster.Close()
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	defer ring.Close()
	var nilClient *goredis.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		clients []goredis.UniversalClient
		want    string
	}{
		{"cluster", []goredis.UniversalClient{plain, cluster}, "client 1 is a *redis.ClusterClient"},
		{"ring", []goredis.UniversalClient{ring}, "client 0 is a *redis.Ring"},
		{"nil interface", []goredis.UniversalClient{plain, nil}, "client 1 is nil"},
		{"nil client", []goredis.UniversalClient{nilClient}, "client 0 is nil"},
		{"none", nil, "none given"},
		{"same client twice", []goredis.UniversalClient{plain, plain}, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := redlock.NewDriverFromClients(ctx, tc.clients, nil)
			if err == nil {
				_ = d.Close()
				t.Fatal("NewFromClients succeeded")
			}
			var ie *backends.InvalidError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewFromClients: %v, want an *InvalidError saying %q", err, tc.want)
			}
		})
	}
}
