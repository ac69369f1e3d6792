package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// newDriver returns a driver over a fresh client of c, with c's minimum
// TTL; both are closed when the test ends (the driver first).
func newDriver(t *testing.T, c *etcdtest.Cluster) (*etcd.Driver, *clientv3.Client) {
	t.Helper()
	return newDriverOver(t, c, c.Client(t))
}

func newDriverOver(t *testing.T, c *etcdtest.Cluster, client *clientv3.Client) (*etcd.Driver, *clientv3.Client) {
	t.Helper()
	d, err := etcd.NewDriver(client, &etcd.Options{MinTTL: c.MinLeaseTTL()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, client
}

func req(key, token string, ttl time.Duration) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: ttl, Fence: true}
}

// getKey reads the etcd key of lock name directly.
func getKey(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name string) *clientv3.GetResponse {
	t.Helper()
	k, err := d.Key(name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestNew(t *testing.T) {
	var ie *backends.InvalidError
	if _, err := etcd.NewDriver(nil, nil); !errors.As(err, &ie) || ie.Field != "client" {
		t.Fatalf("New(nil) = %v, want *InvalidError for client", err)
	}
	cli := unreachableClient(t)
	for _, m := range []time.Duration{-time.Second, 500 * time.Millisecond, 1500 * time.Millisecond} {
		if _, err := etcd.NewDriver(cli, &etcd.Options{MinTTL: m}); !errors.As(err, &ie) || ie.Field != "min ttl" {
			t.Errorf("New with MinTTL %v = %v, want *InvalidError for min ttl", m, err)
		}
	}
	for prefix, want := range map[string]string{"": "dsync/", "app": "app/", "app/": "app/", "/a/b/": "/a/b/"} {
		d, err := etcd.NewDriver(cli, &etcd.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Prefix(); got != want {
			t.Errorf("prefix %q became %q, want %q", prefix, got, want)
		}
		_ = d.Close()
	}
}

// unreachableClient is a client of a port nobody listens on: it connects
// lazily, so creating it succeeds.
func unreachableClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestCapabilities(t *testing.T) {
	d, err := etcd.NewDriver(unreachableClient(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := backends.Capabilities{Name: "etcd", MaxLimit: etcd.MaxSemaphoreSize, Fencing: true, TTLResolution: time.Second,
		MinTTL: 2 * time.Second, MaxTTL: 9_000_000_000 * time.Second, ReleaseNotices: true, Order: backends.StrictOrder}
	if got := d.Capabilities(); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
}

// TestInvalidBeforeIO runs against a port nobody listens on: every bad
// argument must be reported as such, not as a network error.
func TestInvalidBeforeIO(t *testing.T) {
	d, err := etcd.NewDriver(unreachableClient(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	for name, r := range map[string]backends.Request{
		"empty key":      {Token: "t", TTL: time.Second},
		"empty token":    {Key: "k", TTL: time.Second},
		"newline token":  {Key: "k", Token: "a\nb", TTL: time.Second},
		"zero ttl":       {Key: "k", Token: "t"},
		"sub-second ttl": {Key: "k", Token: "t", TTL: 999 * time.Millisecond},
		"huge ttl":       {Key: "k", Token: "t", TTL: 9_000_000_001 * time.Second},
		"value too big":  {Key: "k", Token: "t", TTL: time.Second, Value: make([]byte, backends.MaxValueSize+1)},
	} {
		if _, err := d.Acquire(ctx, r); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Acquire(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := d.Acquire(ctx, backends.Request{Key: "k", Token: "t", TTL: time.Second, Limit: etcd.MaxSemaphoreSize + 1}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Acquire(limit above the maximum) = %v, want ErrInvalid", err)
	}
	if _, err := d.Acquire(ctx, backends.Request{Key: "k", Token: "t", TTL: time.Second, Limit: -1}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Acquire(negative limit) = %v, want ErrInvalid", err)
	}
	checks := map[string]error{
		"Refresh empty key":     d.Refresh(ctx, "", "t", time.Second),
		"Refresh empty token":   d.Refresh(ctx, "k", "", time.Second),
		"Refresh newline token": d.Refresh(ctx, "k", "a\n", time.Second),
		"Refresh zero ttl":      d.Refresh(ctx, "k", "t", 0),
		"Release empty key":     d.Release(ctx, "", "t"),
		"Release empty token":   d.Release(ctx, "k", ""),
	}
	_, checks["Holder empty key"] = d.Holder(ctx, "")
	_, checks["WatchReleases empty key"] = d.WatchReleases(ctx, "")
	_, checks["Key empty"] = d.Key("")
	for name, err := range checks {
		if !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	// A valid call does reach the network, and passes its error through.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := d.Acquire(short, req("k", "t", time.Second)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire on an unreachable cluster = %v, want the context's error", err)
	}
}

func TestKeyLayout(t *testing.T) {
	d, err := etcd.NewDriver(unreachableClient(t), &etcd.Options{Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, want := range map[string]string{
		"report":    "app/report",
		"a/b":       "app/a%2Fb",
		"a%2Fb":     "app/a%252Fb",
		"/":         "app/%2F",
		"100%":      "app/100%25",
		"é{}:\x00x": "app/é{}:\x00x",
	} {
		if got, err := d.Key(name); err != nil || got != want {
			t.Errorf("Key(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	ctx := testutil.Context(t)
	const key = "jobs/nightly" // nests nowhere: stored as dsync/jobs%2Fnightly

	g := testutil.MustGrant(t, ctx, d, backends.Request{Key: key, Token: "a", TTL: 5 * time.Second, Value: []byte("worker-1"), Fence: true})
	resp := getKey(t, ctx, d, cli, key)
	if len(resp.Kvs) != 1 {
		t.Fatalf("hold not stored: %v", resp.Kvs)
	}
	kv := resp.Kvs[0]
	if string(kv.Key) != "dsync/jobs%2Fnightly" || string(kv.Value) != "a\nworker-1" {
		t.Errorf("stored %q = %q, want dsync/jobs%%2Fnightly = \"a\\nworker-1\"", kv.Key, kv.Value)
	}
	if g.Fence != uint64(kv.CreateRevision) || g.Fence == 0 {
		t.Errorf("fence %d, want the key's create revision %d", g.Fence, kv.CreateRevision)
	}
	if g.TTL != 5*time.Second {
		t.Errorf("Grant.TTL = %v, want 5s", g.TTL)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil || ttl.GrantedTTL != 5 {
		t.Errorf("the key's lease: %+v, %v; want a lease granted for 5 s", ttl, err)
	}

	if _, err := d.Acquire(ctx, req(key, "b", 5*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key = %v, want ErrNotAcquired", err)
	}
	if err := d.Release(ctx, key, "b"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release with another token = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if resp := getKey(t, ctx, d, cli, key); len(resp.Kvs) != 0 {
		t.Fatalf("key still there after Release: %v", resp.Kvs)
	}
	if err := d.Release(ctx, key, "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	g2 := testutil.MustGrant(t, ctx, d, req(key, "c", 5*time.Second))
	if g2.Fence <= g.Fence {
		t.Errorf("fence %d after %d: not increasing", g2.Fence, g.Fence)
	}
	if g3 := testutil.MustGrant(t, ctx, d, backends.Request{Key: key + "2", Token: "d", TTL: 5 * time.Second}); g3.Fence != 0 {
		t.Errorf("fence %d without Request.Fence, want 0", g3.Fence)
	}
}

// TestTTL checks the rounding up to whole seconds and the minimum etcd
// raises TTLs to, on a member with etcd's default timing (2 s minimum) and
// one with the fast test timing (1 s).
func TestTTL(t *testing.T) {
	ctx := testutil.Context(t)
	for _, tc := range []struct {
		name     string
		opts     *etcdtest.Options
		min      time.Duration
		req, got []time.Duration
	}{
		{"fast timing", nil, time.Second,
			[]time.Duration{time.Second, 1001 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond},
			[]time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second}},
		{"default timing", &etcdtest.Options{TickMs: 100, ElectionMs: 1000}, 2 * time.Second,
			[]time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 2001 * time.Millisecond},
			[]time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdtest.Start(t, tc.opts)
			if c.MinLeaseTTL() != tc.min {
				t.Fatalf("MinLeaseTTL = %v, want %v", c.MinLeaseTTL(), tc.min)
			}
			b, err := dsync.Open(ctx, c.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			d := lease.Driver(b)
			if got := d.Capabilities().MinTTL; got != tc.min {
				t.Errorf("the opener learned MinTTL %v, want %v", got, tc.min)
			}
			cli := c.Client(t)
			for i, ttl := range tc.req {
				key := fmt.Sprintf("ttl-%d", i)
				g := testutil.MustGrant(t, ctx, d, req(key, "t", ttl))
				if want := tc.got[i]; g.TTL != want {
					t.Errorf("TTL %v granted as %v, want %v", ttl, g.TTL, want)
				}
				resp, err := cli.Get(ctx, "dsync/"+key)
				if err != nil || len(resp.Kvs) != 1 {
					t.Fatalf("Get: %v %v", resp, err)
				}
				lt, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
				if err != nil || time.Duration(lt.GrantedTTL)*time.Second != tc.got[i] {
					t.Errorf("server lease %+v, %v; want granted TTL %v", lt, err, tc.got[i])
				}
				if err := d.Release(ctx, key, "t"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// replyDropper makes a client's calls reach the server but lose their
// replies, for calls that match, while armed: the caller sees an error and
// cannot know the call was applied.
type replyDropper struct {
	armed atomic.Bool
	match func(method string, req any) bool
}

func (r *replyDropper) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && r.match(method, req) && r.armed.CompareAndSwap(true, false) {
		return status.Error(codes.Unknown, "test: reply lost")
	}
	return err
}

func isReleaseTxn(method string, req any) bool {
	tr, ok := req.(*pb.TxnRequest)
	return ok && method == "/etcdserverpb.KV/Txn" && len(tr.Success) == 1 && tr.Success[0].GetRequestDeleteRange() != nil
}

// releaseDroppingDriver returns a driver over a client of its own whose
// next release reply is lost once the returned dropper is armed (the
// release is applied; the caller sees an error).
func releaseDroppingDriver(t *testing.T, c *etcdtest.Cluster) (*etcd.Driver, *replyDropper) {
	t.Helper()
	drop := &replyDropper{match: isReleaseTxn}
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(drop.intercept)}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	d, _ := newDriverOver(t, c, cli)
	return d, drop
}

// TestStaleReleaseKeepsNewerHold is the scenario etcd's own Mutex gets
// wrong: a release whose reply is lost, the same client acquiring the key
// again, then the first release retried. The retry must not delete the
// newer hold.
func TestStaleReleaseKeepsNewerHold(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, drop := releaseDroppingDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const key = "stale"

	g1 := testutil.MustGrant(t, ctx, d, req(key, "first", 5*time.Second))
	drop.armed.Store(true)
	if err := d.Release(ctx, key, "first"); err == nil || errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release with its reply lost = %v, want the client's error", err)
	}
	g2 := testutil.MustGrant(t, ctx, d, backends.Request{Key: key, Token: "second", TTL: 5 * time.Second, Value: []byte("newer"), Fence: true})
	if g2.Fence <= g1.Fence {
		t.Fatalf("newer hold's fence %d not above %d", g2.Fence, g1.Fence)
	}
	// The retry, from the same driver (which still remembers the first
	// hold) and from another one (which reads it from the server).
	if err := d.Release(ctx, key, "first"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("retried Release = %v, want ErrNotHeld", err)
	}
	if err := other.Release(ctx, key, "first"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("retried Release from another driver = %v, want ErrNotHeld", err)
	}
	if err := d.Refresh(ctx, key, "first", 5*time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh of the released hold = %v, want ErrNotHeld", err)
	}
	h, err := other.Holder(ctx, key)
	if err != nil || string(h.Value) != "newer" {
		t.Fatalf("Holder after the stale release = %q, %v; want the newer hold intact", h.Value, err)
	}
	if err := d.Release(ctx, key, "second"); err != nil {
		t.Fatalf("Release of the newer hold: %v", err)
	}
}

func TestRefresh(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)

	t.Run("renews", func(t *testing.T) {
		testutil.MustGrant(t, ctx, d, req("renew", "t", 3*time.Second))
		time.Sleep(1100 * time.Millisecond) // let the TTL run down a second
		for name, drv := range map[string]*etcd.Driver{"owner": d, "another driver": other} {
			if err := drv.Refresh(ctx, "renew", "t", 3*time.Second); err != nil {
				t.Fatalf("Refresh from %s: %v", name, err)
			}
			lease := getKey(t, ctx, d, cli, "renew").Kvs[0].Lease
			if lt, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease)); err != nil || lt.TTL < 2 {
				t.Errorf("after Refresh from %s the lease has %d s left (%v), want about 3", name, lt.TTL, err)
			}
		}
		if err := d.Refresh(ctx, "renew", "t", 4*time.Second); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Refresh above the granted TTL = %v, want ErrInvalid", err)
		}
		if err := other.Refresh(ctx, "renew", "t", 4*time.Second); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Refresh above the granted TTL from another driver = %v, want ErrInvalid", err)
		}
		if err := d.Refresh(ctx, "renew", "t", time.Second); err != nil {
			t.Errorf("Refresh below the granted TTL (the lease keeps its own) = %v", err)
		}
		if err := d.Refresh(ctx, "renew", "someone-else", 3*time.Second); !errors.Is(err, backends.ErrNotHeld) {
			t.Errorf("Refresh with another token = %v, want ErrNotHeld", err)
		}
		if err := d.Release(ctx, "renew", "t"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("key deleted behind its back", func(t *testing.T) {
		testutil.MustGrant(t, ctx, d, req("deleted", "t", 5*time.Second))
		k, _ := d.Key("deleted")
		if _, err := cli.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		// The lease is still alive: only the key check can tell.
		if err := d.Refresh(ctx, "deleted", "t", 5*time.Second); !errors.Is(err, backends.ErrNotHeld) {
			t.Fatalf("Refresh of a deleted key = %v, want ErrNotHeld", err)
		}
		testutil.MustGrant(t, ctx, other, req("deleted", "u", 5*time.Second))
		if err := d.Refresh(ctx, "deleted", "t", 5*time.Second); !errors.Is(err, backends.ErrNotHeld) {
			t.Fatalf("Refresh of a key held by another token = %v, want ErrNotHeld", err)
		}
	})

	t.Run("expired", func(t *testing.T) {
		testutil.MustGrant(t, ctx, d, req("expired", "t", time.Second))
		testutil.Eventually(t, 5*time.Second, "the hold to expire", func() bool {
			return len(getKey(t, ctx, d, cli, "expired").Kvs) == 0
		})
		if err := d.Refresh(ctx, "expired", "t", time.Second); !errors.Is(err, backends.ErrNotHeld) {
			t.Fatalf("Refresh after expiry = %v, want ErrNotHeld", err)
		}
		if len(getKey(t, ctx, d, cli, "expired").Kvs) != 0 {
			t.Fatal("Refresh re-created an expired hold")
		}
		if err := d.Release(ctx, "expired", "t"); !errors.Is(err, backends.ErrNotHeld) {
			t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
		}
	})
}

func TestHolder(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	ctx := testutil.Context(t)
	if _, err := d.Holder(ctx, "h"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a free key = %v, want ErrNotHeld", err)
	}
	testutil.MustGrant(t, ctx, d, backends.Request{Key: "h", Token: "t", TTL: 10 * time.Second, Value: []byte("line1\nline2")})
	h, err := d.Holder(ctx, "h")
	if err != nil || string(h.Value) != "line1\nline2" || h.TTL < 9*time.Second || h.TTL > 10*time.Second {
		t.Fatalf("Holder = %q ttl %v, %v; want the value and about 10s", h.Value, h.TTL, err)
	}
	testutil.MustGrant(t, ctx, d, req("novalue", "t", 10*time.Second))
	if h, err := d.Holder(ctx, "novalue"); err != nil || h.Value != nil {
		t.Fatalf("Holder of a hold without value = %q, %v; want nil", h.Value, err)
	}
	// A key someone wrote without a lease is held, with no expiry.
	if _, err := cli.Put(ctx, "dsync/foreign", "x"); err != nil {
		t.Fatal(err)
	}
	if h, err := d.Holder(ctx, "foreign"); err != nil || h.TTL != 0 || h.Value != nil {
		t.Fatalf("Holder of a key without lease = %+v, %v", h, err)
	}
	if _, err := d.Acquire(ctx, req("foreign", "t", time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("Acquire of a foreign key = %v, want ErrNotAcquired", err)
	}
}

// TestLeaseReuse checks that the driver reuses the lease of a released hold
// or of a lost race, renewed to a full TTL, so that neither costs a grant,
// and that leases never pile up on the server.
func TestLeaseReuse(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	leaseOf := func(name string) clientv3.LeaseID {
		t.Helper()
		resp := getKey(t, ctx, d, cli, name)
		if len(resp.Kvs) != 1 {
			t.Fatalf("%s not held", name)
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}

	testutil.MustGrant(t, ctx, d, req("a", "1", 3*time.Second))
	first := leaseOf("a")
	if err := d.Release(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the idle lease's TTL runs down
	testutil.MustGrant(t, ctx, d, req("b", "2", 3*time.Second))
	if got := leaseOf("b"); got != first {
		t.Errorf("second hold on lease %x, want the released hold's %x reused", got, first)
	}
	if lt, err := cli.TimeToLive(ctx, first); err != nil || lt.TTL < 2 {
		t.Errorf("reused lease has %d s left (%v): not renewed to its 3 s TTL", lt.TTL, err)
	}

	// A lost race keeps its lease for the next attempt.
	testutil.MustGrant(t, ctx, other, req("busy", "x", 3*time.Second))
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := d.Acquire(ctx, req("busy", fmt.Sprint("y", i), 3*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key = %v", err)
		}
	}
	after, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Leases) - len(before.Leases); n > 1 {
		t.Errorf("50 lost races left %d more leases on the server, want at most 1", n)
	}
}

func TestWatchReleases(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, _ := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	notice := func(s backends.Subscription, within time.Duration) bool {
		select {
		case <-s.C():
			return true
		case <-time.After(within):
			return false
		}
	}

	testutil.MustGrant(t, ctx, other, req("w", "t", 10*time.Second))
	s1, err := d.WatchReleases(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := d.WatchReleases(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	// The watch starts in the background, after the highest revision the
	// driver has seen; make it see the current one, as a failed attempt
	// would.
	if _, err := d.Acquire(ctx, req("w", "u", 10*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatal(err)
	}
	start := time.Now()
	if err := other.Release(ctx, "w", "t"); err != nil {
		t.Fatal(err)
	}
	if !notice(s1, 5*time.Second) || !notice(s2, 5*time.Second) {
		t.Fatal("release not noticed by both subscriptions")
	}
	t.Logf("release noticed after %v", time.Since(start))
	s2.Close()
	s2.Close() // idempotent

	// An acquisition is no release; an expiry is. A subscription made
	// now, on the watch already running, gets no notice of the watch's
	// start (one may still reach s1: its first attempt came before the
	// watch, see WatchReleases); let that one come first.
	notice(s1, 300*time.Millisecond)
	s3, err := d.WatchReleases(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	testutil.MustGrant(t, ctx, other, req("w", "v", time.Second))
	if notice(s3, 200*time.Millisecond) {
		t.Fatal("notice without a release")
	}
	if !notice(s3, 5*time.Second) {
		t.Fatal("expiry not noticed")
	}

	// A new watch starts just after the revision of the attempt that found
	// the key held, and etcd then serves it from its synced path: the
	// notice comes as the release happens, not at the next round of etcd's
	// 100 ms catch-up loop (which a watch from an older revision waits for,
	// as etcd's own Mutex's do).
	var lat []time.Duration
	for i := range 7 {
		tok := fmt.Sprint("sync", i)
		testutil.MustGrant(t, ctx, other, req("sync", tok, 10*time.Second))
		s, err := d.WatchReleases(ctx, "sync")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Acquire(ctx, req("sync", "waiter", 10*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the watch registers meanwhile
		if err := other.Release(ctx, "sync", tok); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		if !notice(s, 5*time.Second) {
			t.Fatal("release not noticed")
		}
		lat = append(lat, time.Since(released))
		s.Close()
	}
	slices.Sort(lat)
	t.Logf("first notice of a new watch after %v (sorted)", lat)
	if lat[3] > 40*time.Millisecond {
		t.Errorf("median first notice after %v: the watch is not on etcd's synced path", lat[3])
	}

	if _, err := d.WatchReleases(ctx, ""); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("WatchReleases(\"\") = %v, want ErrInvalid", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.WatchReleases(done, "w"); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchReleases with a done context = %v, want context.Canceled", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WatchReleases(ctx, "w"); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("WatchReleases after Close = %v, want ErrClosed", err)
	}
	s1.Close() // after the driver's Close: no effect, no hang
}

func TestUseAfterClose(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	ctx := testutil.Context(t)
	testutil.MustGrant(t, ctx, d, req("k", "t", 5*time.Second))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Acquire(ctx, req("k2", "t", time.Second)); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Acquire after Close = %v", err)
	}
	if err := d.Refresh(ctx, "k", "t", 5*time.Second); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Refresh after Close = %v", err)
	}
	if err := d.Release(ctx, "k", "t"); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Release after Close = %v", err)
	}
	if _, err := d.Holder(ctx, "k"); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Holder after Close = %v", err)
	}
	// A client passed to New stays open, and the hold is left to expire.
	if resp, err := cli.Get(ctx, "dsync/k"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("after Close: %v, %v; want the client open and the hold in place", resp, err)
	}
}

// slowReplies delays the reply of successful acquisitions while armed, as a
// slow network would: the hold is on the server, the caller learns it late.
type slowReplies struct {
	*etcd.Driver
	delay time.Duration
	armed atomic.Int32 // number of replies left to delay
}

func (s *slowReplies) Acquire(ctx context.Context, r backends.Request) (backends.Grant, error) {
	g, err := s.Driver.Acquire(ctx, r)
	if err == nil && s.armed.Add(-1) >= 0 {
		time.Sleep(s.delay) // the reply is in flight; ctx cannot stop it
	}
	return g, err
}

// TestNoSuccessAfterExpiry is the check Jepsen found missing in etcd 3.4.3's
// lock service, which could return a lock whose lease had expired while it
// waited. Here a waiter never holds a lease while it waits: each attempt
// takes a hold with a lease renewed by the attempt itself, and the layer
// above counts validity from the attempt's start. An attempt whose reply
// arrives after the TTL is released and retried, never returned.
func TestNoSuccessAfterExpiry(t *testing.T) {
	c := etcdtest.Start(t, nil)
	inner, cli := newDriver(t, c)
	slow := &slowReplies{Driver: inner, delay: 1200 * time.Millisecond}
	b, err := dsync.NewBackend(slow, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	ttl := c.MinLeaseTTL()

	holder, err := locker.New(b, "jepsen", &locker.Options{TTL: 10 * time.Second, Value: []byte("holder")})
	if err != nil {
		t.Fatal(err)
	}
	first, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := locker.New(b, "jepsen", &locker.Options{TTL: ttl, Value: []byte("waiter")})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease dsync.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		ls, err := waiter.Acquire(ctx) // waits, then its first success is slow
		got <- result{ls, err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	slow.armed.Store(1)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.lease.Release(ctx)
	if v := r.lease.Validity(); v <= 0 || r.lease.Err() != nil {
		t.Fatalf("waiter returned a lease with validity %v, err %v", v, r.lease.Err())
	}
	if slow.armed.Load() > 0 {
		t.Fatal("the slow reply was not exercised")
	}
	h, err := inner.Holder(ctx, "jepsen")
	if err != nil || string(h.Value) != "waiter" {
		t.Fatalf("server's holder = %q, %v; want the waiter", h.Value, err)
	}
	resp := getKey(t, ctx, inner, cli, "jepsen")
	if lt, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil || lt.TTL < 0 {
		t.Fatalf("the waiter's lease on the server: %+v, %v", lt, err)
	}
	if uint64(resp.Kvs[0].CreateRevision) != r.lease.Token() {
		t.Fatalf("the waiter's token %d is not the key's create revision %d: the slow hold was kept", r.lease.Token(), resp.Kvs[0].CreateRevision)
	}
}

// TestConcurrentUse runs many goroutines through one driver on a few keys,
// under the race detector, checking exclusion per key.
func TestConcurrentUse(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	var (
		inside [3]atomic.Int32
		bad    atomic.Int32
		wg     sync.WaitGroup
	)
	for g := range 12 {
		wg.Go(func() {
			key := fmt.Sprint("k", g%3)
			for i := range 20 {
				tok := fmt.Sprint(g, "-", i)
				_, err := d.Acquire(ctx, req(key, tok, 5*time.Second))
				if errors.Is(err, backends.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if inside[g%3].Add(1) != 1 {
					bad.Add(1)
				}
				inside[g%3].Add(-1)
				if err := d.Release(ctx, key, tok); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d exclusion violations", n)
	}
}
