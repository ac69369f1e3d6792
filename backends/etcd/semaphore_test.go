package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/semaphore"
)

func semReq(key, token string, limit int, ttl time.Duration) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: ttl, Limit: limit, Fence: true}
}

// permitKeys lists the keys below the semaphore's prefix, by create
// revision.
func permitKeys(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name string) []*mvccpb.KeyValue {
	t.Helper()
	p, err := d.SemaphorePrefix(name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs
}

// permitOf returns the key of token's permit.
func permitOf(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name, token string) *mvccpb.KeyValue {
	t.Helper()
	for _, kv := range permitKeys(t, ctx, d, cli, name) {
		if strings.HasPrefix(string(kv.Value), token+"\n") {
			return kv
		}
	}
	t.Fatalf("no permit of %q has token %q", name, token)
	return nil
}

// permitTokens lists the tokens of the semaphore's keys, by create
// revision.
func permitTokens(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name string) []string {
	t.Helper()
	var toks []string
	for _, kv := range permitKeys(t, ctx, d, cli, name) {
		tok, _, _ := strings.Cut(string(kv.Value), "\n")
		toks = append(toks, tok)
	}
	return toks
}

func countPermitKeys(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name string) int {
	t.Helper()
	return len(permitKeys(t, ctx, d, cli, name))
}

func notice(s backends.Subscription, within time.Duration) bool {
	select {
	case <-s.C():
		return true
	case <-time.After(within):
		return false
	}
}

func TestSemaphoreKeyLayout(t *testing.T) {
	d, err := etcd.NewDriver(unreachableClient(t), &etcd.Options{Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, want := range map[string]string{"exports": "app/exports/", "a/b": "app/a%2Fb/"} {
		if got, err := d.SemaphorePrefix(name); err != nil || got != want {
			t.Errorf("SemaphorePrefix(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := d.SemaphorePrefix(""); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("SemaphorePrefix(\"\") = %v, want ErrInvalid", err)
	}
}

// TestSemaphoreAdmitsLimit: exactly limit permits, from several drivers;
// a try on a full semaphore leaves no key behind; a release frees exactly
// one slot; fences grow over every permit.
func TestSemaphoreAdmitsLimit(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "exports", 3

	var fences []uint64
	for i := range limit {
		drv := d
		if i%2 == 1 {
			drv = other
		}
		g := testutil.MustGrant(t, ctx, drv, backends.Request{Key: name, Token: fmt.Sprint("p", i), TTL: 5 * time.Second, Limit: limit, Value: []byte(fmt.Sprint("worker-", i)), Fence: true})
		if g.TTL != 5*time.Second {
			t.Errorf("Grant.TTL = %v, want 5s", g.TTL)
		}
		fences = append(fences, g.Fence)
	}
	kvs := permitKeys(t, ctx, d, cli, name)
	if len(kvs) != limit {
		t.Fatalf("%d permit keys, want %d", len(kvs), limit)
	}
	for i, kv := range kvs {
		if want := "dsync/exports/" + strconv.FormatInt(kv.Lease, 16); string(kv.Key) != want {
			t.Errorf("permit %d stored as %q, want %q: below the prefix, named after its lease", i, kv.Key, want)
		}
		if want := fmt.Sprint("p", i, "\n3\nworker-", i); string(kv.Value) != want {
			t.Errorf("permit %d's value %q, want %q", i, kv.Value, want)
		}
		if uint64(kv.CreateRevision) != fences[i] {
			t.Errorf("permit %d's fence %d, want its key's create revision %d", i, fences[i], kv.CreateRevision)
		}
		if lt, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err != nil || lt.GrantedTTL != 5 {
			t.Errorf("permit %d's lease: %+v, %v; want one granted for 5 s", i, lt, err)
		}
	}
	if len(slices.Compact(slices.Clone([]int64{kvs[0].Lease, kvs[1].Lease, kvs[2].Lease}))) != 3 {
		t.Errorf("permits share leases: %x %x %x", kvs[0].Lease, kvs[1].Lease, kvs[2].Lease)
	}
	if !slices.IsSorted(fences) || len(slices.Compact(slices.Clone(fences))) != limit {
		t.Fatalf("fences %v do not increase", fences)
	}
	// The semaphore has no lock: its lock key was never written.
	if resp := getKey(t, ctx, d, cli, name); len(resp.Kvs) != 0 {
		t.Fatalf("a lock key beside the permits: %v", resp.Kvs)
	}

	for i := range 5 {
		testutil.WantNotAcquired(t, ctx, other, semReq(name, fmt.Sprint("late", i), limit, 5*time.Second))
		if n := countPermitKeys(t, ctx, d, cli, name); n != limit {
			t.Fatalf("after a failed try, %d permit keys, want %d: the try left its key", n, limit)
		}
	}
	// The driver holding every permit is refused like any other.
	testutil.WantNotAcquired(t, ctx, d, semReq(name, "late-d", limit, 5*time.Second))

	if err := other.Release(ctx, name, "p1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	g := testutil.MustGrant(t, ctx, d, semReq(name, "p3", limit, 5*time.Second))
	if g.Fence <= fences[limit-1] {
		t.Errorf("fence %d after %v: not increasing", g.Fence, fences)
	}
	testutil.WantNotAcquired(t, ctx, other, semReq(name, "p4", limit, 5*time.Second))
	if n := countPermitKeys(t, ctx, d, cli, name); n != limit {
		t.Fatalf("%d permit keys, want %d", n, limit)
	}
	for _, tok := range []string{"p0", "p2", "p3"} {
		if err := d.Release(ctx, name, tok); err != nil {
			t.Fatalf("Release(%s): %v", tok, err)
		}
	}
	if n := countPermitKeys(t, ctx, d, cli, name); n != 0 {
		t.Fatalf("%d permit keys after every release, want 0", n)
	}
}

// TestSemaphoreReleaseWakes: a release frees a slot and wakes a watcher of
// the name; a failed try of another driver (whose key comes and goes) does
// not.
func TestSemaphoreReleaseWakes(t *testing.T) {
	c := etcdtest.Start(t, nil)
	holder, _ := newDriver(t, c)
	waiter, _ := newDriver(t, c)
	third, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "wake", 2
	for i := range limit {
		testutil.MustGrant(t, ctx, holder, semReq(name, fmt.Sprint("h", i), limit, 10*time.Second))
	}
	s, err := waiter.WatchReleases(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testutil.WantNotAcquired(t, ctx, waiter, semReq(name, "w0", limit, 10*time.Second))
	// The watch starts in the background; if it starts after that refused
	// attempt, it gives one notice (a release may have come in between; see
	// WatchReleases). Let that one come first.
	notice(s, 500*time.Millisecond)
	for i := range 3 {
		testutil.WantNotAcquired(t, ctx, third, semReq(name, fmt.Sprint("t", i), limit, 10*time.Second))
	}
	if notice(s, 300*time.Millisecond) {
		t.Fatal("notice after failed tries, which free no permit")
	}
	released := time.Now()
	if err := holder.Release(ctx, name, "h1"); err != nil {
		t.Fatal(err)
	}
	if !notice(s, 5*time.Second) {
		t.Fatal("release of a permit not noticed")
	}
	t.Logf("release noticed after %v", time.Since(released))
	testutil.MustGrant(t, ctx, waiter, semReq(name, "w1", limit, 10*time.Second))

	// A local release wakes the driver's own watchers at once.
	s2, err := holder.WatchReleases(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	testutil.WantNotAcquired(t, ctx, holder, semReq(name, "h2", limit, 10*time.Second))
	if err := holder.Release(ctx, name, "h0"); err != nil {
		t.Fatal(err)
	}
	if !notice(s2, 5*time.Second) {
		t.Fatal("the driver's own release not noticed")
	}
}

// TestSemaphoreExpiryFrees: a permit whose lease expires frees its slot,
// and its expiry wakes a watcher.
func TestSemaphoreExpiryFrees(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "expiry", 2
	testutil.MustGrant(t, ctx, d, semReq(name, "long", limit, 10*time.Second))
	testutil.MustGrant(t, ctx, d, semReq(name, "short", limit, time.Second))
	s, err := other.WatchReleases(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testutil.WantNotAcquired(t, ctx, other, semReq(name, "o1", limit, 10*time.Second))
	if !notice(s, 10*time.Second) {
		t.Fatal("expiry of a permit not noticed")
	}
	testutil.Eventually(t, 5*time.Second, "the expired permit's key to go", func() bool {
		return countPermitKeys(t, ctx, d, cli, name) == 1
	})
	testutil.MustGrant(t, ctx, other, semReq(name, "o2", limit, 10*time.Second))
	if err := d.Refresh(ctx, name, "short", time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh of an expired permit = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, name, "short"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release of an expired permit = %v, want ErrNotHeld", err)
	}
	if n := countPermitKeys(t, ctx, d, cli, name); n != 2 {
		t.Fatalf("%d permit keys, want the 2 live ones", n)
	}
}

func TestSemaphoreRefresh(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "refresh", 2
	testutil.MustGrant(t, ctx, d, semReq(name, "a", limit, 3*time.Second))
	testutil.MustGrant(t, ctx, d, semReq(name, "b", limit, 3*time.Second))
	leaseOf := func(token string) clientv3.LeaseID {
		t.Helper()
		return clientv3.LeaseID(permitOf(t, ctx, d, cli, name, token).Lease)
	}
	time.Sleep(1100 * time.Millisecond) // let the TTLs run down a second
	for drvName, drv := range map[string]*etcd.Driver{"owner": d, "another driver": other} {
		if err := drv.Refresh(ctx, name, "a", 3*time.Second); err != nil {
			t.Fatalf("Refresh from %s: %v", drvName, err)
		}
		if lt, err := cli.TimeToLive(ctx, leaseOf("a")); err != nil || lt.TTL < 2 {
			t.Errorf("after Refresh from %s the permit's lease has %d s left (%v), want about 3", drvName, lt.TTL, err)
		}
	}
	if lt, err := cli.TimeToLive(ctx, leaseOf("b")); err != nil || lt.TTL > 2 {
		t.Errorf("refreshing permit a renewed b's lease too: %d s left (%v)", lt.TTL, err)
	}
	if err := d.Refresh(ctx, name, "a", 4*time.Second); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Refresh above the granted TTL = %v, want ErrInvalid", err)
	}
	if err := d.Refresh(ctx, name, "nobody", 3*time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh with an unknown token = %v, want ErrNotHeld", err)
	}
	// A permit deleted behind the driver's back is not re-created.
	if _, err := cli.Delete(ctx, string(permitOf(t, ctx, d, cli, name, "b").Key)); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, name, "b", 3*time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh of a deleted permit = %v, want ErrNotHeld", err)
	}
	if n := countPermitKeys(t, ctx, d, cli, name); n != 1 {
		t.Fatalf("%d permit keys, want 1", n)
	}
}

// TestSemaphoreStaleRelease: a release with a wrong or spent token is
// ErrNotHeld and deletes no other holder's permit, from the driver that
// took the permits or from another.
func TestSemaphoreStaleRelease(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, drop := releaseDroppingDriver(t, c)
	other, cli := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "stale", 2

	testutil.MustGrant(t, ctx, d, semReq(name, "first", limit, 10*time.Second))
	testutil.MustGrant(t, ctx, other, semReq(name, "kept", limit, 10*time.Second))
	drop.armed.Store(true)
	if err := d.Release(ctx, name, "first"); err == nil || errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release with its reply lost = %v, want the client's error", err)
	}
	testutil.MustGrant(t, ctx, d, semReq(name, "second", limit, 10*time.Second))
	for drvName, drv := range map[string]*etcd.Driver{"owner": d, "another driver": other} {
		for _, tok := range []string{"first", "wrong", "kep", "kept\x00"} {
			if err := drv.Release(ctx, name, tok); !errors.Is(err, backends.ErrNotHeld) {
				t.Errorf("Release(%q) from %s = %v, want ErrNotHeld", tok, drvName, err)
			}
		}
	}
	if toks := permitTokens(t, ctx, d, cli, name); !slices.Equal(toks, []string{"kept", "second"}) {
		t.Fatalf("permits after stale releases: %q, want kept and second intact", toks)
	}
	// A permit taken by one driver is released by another.
	if err := other.Release(ctx, name, "second"); err != nil {
		t.Fatalf("Release of d's permit from another driver: %v", err)
	}
	if err := d.Release(ctx, name, "second"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release of a permit another driver released = %v, want ErrNotHeld", err)
	}
}

// TestSemaphoreLimitMismatch: a request whose limit disagrees with the live
// holders' fails with LimitMismatch, leaves no key, and a lock and a
// semaphore of one name exclude each other the same way.
func TestSemaphoreLimitMismatch(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	wantMismatch := func(drv backends.Driver, r backends.Request, holders int) {
		t.Helper()
		_, err := drv.Acquire(ctx, r)
		var ie *backends.InvalidError
		if !errors.As(err, &ie) || ie.Field != "size" {
			t.Fatalf("Acquire(limit %d) = %v, want LimitMismatch", r.Limit, err)
		}
		if want := backends.LimitMismatch(r.Key, max(r.Limit, 1), holders); err.Error() != want.Error() {
			t.Fatalf("Acquire(limit %d) = %v, want %v", r.Limit, err, want)
		}
	}

	testutil.MustGrant(t, ctx, d, semReq("m", "a", 3, 5*time.Second))
	for _, drv := range []*etcd.Driver{d, other} {
		wantMismatch(drv, semReq("m", "b", 2, 5*time.Second), 3)
		wantMismatch(drv, semReq("m", "c", 5, 5*time.Second), 3)
		wantMismatch(drv, req("m", "lock", 5*time.Second), 3) // a lock is size 1
	}
	if n := countPermitKeys(t, ctx, d, cli, "m"); n != 1 {
		t.Fatalf("%d permit keys after refused attempts, want 1", n)
	}
	if resp := getKey(t, ctx, d, cli, "m"); len(resp.Kvs) != 0 {
		t.Fatal("a refused lock attempt wrote the lock key")
	}
	testutil.MustGrant(t, ctx, other, semReq("m", "d", 3, 5*time.Second))
	for _, tok := range []string{"a", "d"} {
		if err := d.Release(ctx, "m", tok); err != nil {
			t.Fatal(err)
		}
	}
	// Once they are gone, the other size holds.
	testutil.MustGrant(t, ctx, other, semReq("m", "e", 2, 5*time.Second))
	wantMismatch(d, semReq("m", "f", 3, 5*time.Second), 2)

	// A lock excludes a semaphore of its name.
	testutil.MustGrant(t, ctx, d, req("locked", "l", 5*time.Second))
	wantMismatch(other, semReq("locked", "s", 2, 5*time.Second), 1)
	if n := countPermitKeys(t, ctx, d, cli, "locked"); n != 0 {
		t.Fatalf("a refused permit attempt left %d keys", n)
	}
	if err := d.Release(ctx, "locked", "l"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, other, semReq("locked", "s", 2, 5*time.Second))
	if err := other.Release(ctx, "locked", "s"); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreHolder: the holder reported is the permit whose lease
// expires last.
func TestSemaphoreHolder(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, _ := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name = "holder"
	if _, err := d.Holder(ctx, name); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a free semaphore = %v, want ErrNotHeld", err)
	}
	testutil.MustGrant(t, ctx, d, backends.Request{Key: name, Token: "a", TTL: 3 * time.Second, Limit: 3, Value: []byte("first")})
	testutil.MustGrant(t, ctx, d, backends.Request{Key: name, Token: "b", TTL: 20 * time.Second, Limit: 3, Value: []byte("longest")})
	testutil.MustGrant(t, ctx, d, backends.Request{Key: name, Token: "c", TTL: 5 * time.Second, Limit: 3, Value: []byte("last")})
	for _, drv := range []*etcd.Driver{d, other} {
		h, err := drv.Holder(ctx, name)
		if err != nil || string(h.Value) != "longest" || h.TTL < 18*time.Second || h.TTL > 20*time.Second {
			t.Fatalf("Holder = %q ttl %v, %v; want the 20 s permit", h.Value, h.TTL, err)
		}
	}
	if err := d.Release(ctx, name, "b"); err != nil {
		t.Fatal(err)
	}
	if h, err := other.Holder(ctx, name); err != nil || string(h.Value) != "last" {
		t.Fatalf("Holder = %q, %v; want the 5 s permit", h.Value, err)
	}
}

// failTxns makes the matching transactions of a client fail without being
// sent, while armed.
type failTxns struct {
	armed atomic.Int32 // calls left to fail
	match func(*pb.TxnRequest) bool
}

func (f *failTxns) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if tr, ok := req.(*pb.TxnRequest); ok && f.match(tr) && f.armed.Add(-1) >= 0 {
		return status.Error(codes.Unavailable, "test: transaction not sent")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestSemaphoreFailedCleanup: an attempt that gets no permit and cannot
// delete its key returns an error (the outcome is unknown to the caller),
// and the release of the request's key and token, which the layer above
// makes, removes the key: Grant.Key is not needed.
func TestSemaphoreFailedCleanup(t *testing.T) {
	c := etcdtest.Start(t, nil)
	fail := &failTxns{match: func(tr *pb.TxnRequest) bool {
		return len(tr.Success) == 1 && tr.Success[0].GetRequestDeleteRange() != nil
	}}
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(fail.intercept)}
	failing, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = failing.Close() })
	d, _ := newDriverOver(t, c, failing)
	other, cli := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "cleanup", 2
	testutil.MustGrant(t, ctx, other, semReq(name, "a", limit, 10*time.Second))
	testutil.MustGrant(t, ctx, other, semReq(name, "b", limit, 10*time.Second))

	for i, releaser := range []*etcd.Driver{d, other} {
		tok := fmt.Sprint("x", i)
		fail.armed.Store(1)
		_, err = d.Acquire(ctx, semReq(name, tok, limit, 10*time.Second))
		if err == nil || errors.Is(err, backends.ErrNotAcquired) || errors.Is(err, backends.ErrInvalid) {
			t.Fatalf("Acquire whose clean-up failed = %v, want an error of unknown outcome", err)
		}
		if n := countPermitKeys(t, ctx, d, cli, name); n != limit+1 {
			t.Fatalf("%d permit keys, want the attempt's left beside the %d permits", n, limit)
		}
		if err := releaser.Release(ctx, name, tok); err != nil {
			t.Fatalf("Release of the attempt's key (driver %d): %v", i, err)
		}
		if n := countPermitKeys(t, ctx, d, cli, name); n != limit {
			t.Fatalf("%d permit keys after the release, want the %d permits", n, limit)
		}
	}
	testutil.WantNotAcquired(t, ctx, d, semReq(name, "y", limit, 10*time.Second))
}

// TestSemaphoreHammer runs goroutines over several drivers (one client
// each), through the semaphore package: no more than limit of them are
// ever inside, and limit of them are at some point.
func TestSemaphoreHammer(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const limit, clients, perClient, rounds = 3, 4, 3, 8
	var (
		inside, most, count atomic.Int32
		fences              sync.Map
		wg                  sync.WaitGroup
	)
	for range clients {
		d, _ := newDriver(t, c)
		b, err := dsync.NewBackend(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		sem, err := semaphore.New(b, "hammer", limit, &semaphore.Options{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range perClient {
			wg.Go(func() {
				for range rounds {
					p, err := sem.Acquire(ctx)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if _, dup := fences.LoadOrStore(p.Token(), true); dup {
						t.Errorf("fence %d handed out twice", p.Token())
					}
					time.Sleep(10 * time.Millisecond) // the work: holders overlap
					count.Add(1)
					inside.Add(-1)
					if err := p.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Fatalf("%d holders at once in a semaphore of %d", m, limit)
	} else if m < limit {
		t.Fatalf("at most %d holders at once: the semaphore never filled its %d permits", m, limit)
	}
	if n := count.Load(); n != clients*perClient*rounds {
		t.Fatalf("%d critical sections, want %d", n, clients*perClient*rounds)
	}
}

// TestSemaphoreKeyNamesReused: a driver's permits are named after its
// leases, which it reuses, so that acquisitions and failed tries do not
// pile up deleted keys below the semaphore's prefix, which every attempt
// reads and etcd keeps in its index until a compaction.
func TestSemaphoreKeyNamesReused(t *testing.T) {
	c := etcdtest.Start(t, nil)
	d, cli := newDriver(t, c)
	other, _ := newDriver(t, c)
	ctx := testutil.Context(t)
	const name, limit = "reuse", 2
	names := map[string]bool{}
	for i := range 20 {
		tok := fmt.Sprint("c", i)
		testutil.MustGrant(t, ctx, d, semReq(name, tok, limit, 5*time.Second))
		names[string(permitOf(t, ctx, d, cli, name, tok).Key)] = true
		if err := d.Release(ctx, name, tok); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) != 1 {
		t.Errorf("20 cycles of one driver used %d permit key names, want 1", len(names))
	}
	testutil.MustGrant(t, ctx, other, semReq(name, "a", limit, 5*time.Second))
	testutil.MustGrant(t, ctx, other, semReq(name, "b", limit, 5*time.Second))
	var watched atomic.Int32
	w := cli.Watch(ctx, "dsync/"+name+"/", clientv3.WithPrefix(), clientv3.WithFilterDelete())
	done := make(chan struct{})
	seen := map[string]bool{}
	go func() {
		defer close(done)
		for resp := range w {
			for _, ev := range resp.Events {
				seen[string(ev.Kv.Key)] = true
				if watched.Add(1) == 20 {
					return
				}
			}
		}
	}()
	for i := range 20 {
		testutil.WantNotAcquired(t, ctx, d, semReq(name, fmt.Sprint("f", i), limit, 5*time.Second))
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("saw %d puts of the 20 failed tries", watched.Load())
	}
	if len(seen) != 1 {
		t.Errorf("20 failed tries of one driver put %d key names, want 1", len(seen))
	}
}
