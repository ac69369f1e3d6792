package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// waiter is a request of the waiter named name: names sort as the
// layer above draws them (16 hex digits of time first).
func waiter(key, name, token string, ttl time.Duration) backends.Request {
	r := req(key, token, ttl)
	r.Waiter = fmt.Sprintf("%016x-%s", 1, name)
	return r
}

// line returns the keys of name's line of waiters, in etcd's order.
func line(t *testing.T, ctx context.Context, d *etcd.Driver, cli *clientv3.Client, name string) []string {
	t.Helper()
	k, err := d.Key(name)
	if err != nil {
		t.Fatal(err)
	}
	p := etcd.LinePrefix(k)
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key[len(p):]))
	}
	return keys
}

// TestLineOrder: waiters on separate drivers are served in the order of
// their names, whatever the order of their attempts, with strictly
// increasing fencing tokens.
func TestLineOrder(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "ordered", 5 * time.Second
	holder, cli := newDriver(t, c)
	ds := make([]*etcd.Driver, 3)
	for i := range ds {
		ds[i], _ = newDriver(t, c)
	}
	reqs := []backends.Request{waiter(key, "a", "ta", ttl), waiter(key, "b", "tb", ttl), waiter(key, "c", "tc", ttl)}

	last := testutil.MustGrant(t, ctx, holder, req(key, "h", ttl)).Fence
	for _, i := range []int{2, 0, 1} { // they join out of order
		testutil.WantNotAcquired(t, ctx, ds[i], reqs[i])
	}
	if got, want := line(t, ctx, holder, cli, key), []string{reqs[0].Waiter, reqs[1].Waiter, reqs[2].Waiter}; !slices.Equal(got, want) {
		t.Fatalf("line %q, want %q", got, want)
	}
	if err := holder.Release(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	for served := range 3 {
		// Everyone tries, the last in line first: only the head wins.
		var won []int
		var fence uint64
		for i := 2; i >= 0; i-- {
			if i < served {
				continue
			}
			g, err := ds[i].Acquire(ctx, reqs[i])
			switch {
			case err == nil:
				won = append(won, i)
				fence = g.Fence
			case err != backends.ErrNotAcquired:
				t.Fatalf("waiter %d: %v", i, err)
			}
		}
		if !slices.Equal(won, []int{served}) {
			t.Fatalf("round %d: won by %v, want [%d]", served, won, served)
		}
		if fence <= last {
			t.Fatalf("fence %d after %d: not increasing", fence, last)
		}
		last = fence
		if err := ds[served].Release(ctx, key, reqs[served].Token); err != nil {
			t.Fatal(err)
		}
	}
	if l := line(t, ctx, holder, cli, key); len(l) != 0 {
		t.Fatalf("line %q left after every waiter was served", l)
	}
}

// TestLineRefusesLoneAttempts: a lone attempt (TryAcquire) does not barge
// in while someone waits, even on a free lock, and succeeds once the line
// is empty.
func TestLineRefusesLoneAttempts(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "lone", 5 * time.Second
	holder, _ := newDriver(t, c)
	w, _ := newDriver(t, c)
	lone, _ := newDriver(t, c)
	testutil.MustGrant(t, ctx, holder, req(key, "h", ttl))
	wr := waiter(key, "a", "ta", ttl)
	testutil.WantNotAcquired(t, ctx, w, wr)
	if err := holder.Release(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	testutil.WantNotAcquired(t, ctx, lone, req(key, "l", ttl))
	testutil.MustGrant(t, ctx, w, wr)
	if err := w.Release(ctx, key, wr.Token); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, lone, req(key, "l2", ttl))
}

// TestLineLeave: a waiter that leaves no longer blocks the next one, and
// its key is gone.
func TestLineLeave(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "leave", 5 * time.Second
	holder, cli := newDriver(t, c)
	d1, _ := newDriver(t, c)
	d2, _ := newDriver(t, c)
	r1, r2 := waiter(key, "a", "ta", ttl), waiter(key, "b", "tb", ttl)
	testutil.MustGrant(t, ctx, holder, req(key, "h", ttl))
	testutil.WantNotAcquired(t, ctx, d1, r1)
	testutil.WantNotAcquired(t, ctx, d2, r2)
	if err := d1.Leave(ctx, key, r1.Waiter); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if l := line(t, ctx, holder, cli, key); !slices.Equal(l, []string{r2.Waiter}) {
		t.Fatalf("line %q after Leave, want only %q", l, r2.Waiter)
	}
	if err := d1.Leave(ctx, key, r1.Waiter); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := holder.Release(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, d2, r2)

	var ie *backends.InvalidError
	if err := d1.Leave(ctx, key, "Not/valid"); !errors.As(err, &ie) {
		t.Errorf("Leave with an invalid waiter = %v, want *InvalidError", err)
	}
	if err := d1.Leave(ctx, key, ""); err != nil {
		t.Errorf("Leave of no waiter = %v, want nil", err)
	}
	_ = d1.Close()
	if err := d1.Leave(ctx, key, r1.Waiter); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Leave after Close = %v, want ErrClosed", err)
	}
}

// TestLineDeadWaiter: the place of a waiter that stops attempting without
// leaving (its driver closed, or its lease revoked) lapses within its TTL.
func TestLineDeadWaiter(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	ttl := c.MinLeaseTTL()
	for _, how := range []string{"closed", "revoked"} {
		t.Run(how, func(t *testing.T) {
			key := "dead-" + how
			holder, cli := newDriver(t, c)
			dead, _ := newDriver(t, c)
			next, _ := newDriver(t, c)
			rd, rn := waiter(key, "a", "ta", ttl), waiter(key, "b", "tb", ttl)
			testutil.MustGrant(t, ctx, holder, req(key, "h", 10*time.Second))
			testutil.WantNotAcquired(t, ctx, dead, rd)
			testutil.WantNotAcquired(t, ctx, next, rn)
			switch how {
			case "closed":
				_ = dead.Close()
			case "revoked":
				k, _ := dead.Key(key)
				resp, err := cli.Get(ctx, etcd.LinePrefix(k)+rd.Waiter)
				if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
					t.Fatalf("the dead waiter's key: %v, %v", resp, err)
				}
				if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
					t.Fatal(err)
				}
			}
			if err := holder.Release(ctx, key, "h"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			testutil.Eventually(t, ttl+3*time.Second, "the next waiter served", func() bool {
				_, err := next.Acquire(ctx, rn)
				if err != nil && err != backends.ErrNotAcquired {
					t.Fatal(err)
				}
				return err == nil
			})
			t.Logf("served %v after the release", time.Since(start))
		})
	}
}

// TestLineHolderIgnoresLine: Holder reports the lock's holder, or nobody,
// whoever waits.
func TestLineHolderIgnoresLine(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "holder", 5 * time.Second
	holder, _ := newDriver(t, c)
	w, _ := newDriver(t, c)
	h := req(key, "h", ttl)
	h.Value = []byte("me")
	testutil.MustGrant(t, ctx, holder, h)
	testutil.WantNotAcquired(t, ctx, w, waiter(key, "a", "ta", ttl))
	if info, err := w.Holder(ctx, key); err != nil || string(info.Value) != "me" {
		t.Fatalf("Holder = %+v, %v; want the holder's value", info, err)
	}
	if err := holder.Release(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	if info, err := w.Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a free lock with a waiter = %+v, %v; want ErrNotHeld", info, err)
	}
}

// TestLineNotForSemaphores: a semaphore's attempts keep no line, and a
// lock's waiter on a semaphore's name gets the limit mismatch from its
// second attempt on, and leaves no key.
func TestLineNotForSemaphores(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "sem", 5 * time.Second
	d, cli := newDriver(t, c)
	for i := range 3 {
		r := waiter(key, fmt.Sprint(i), fmt.Sprint("t", i), ttl)
		r.Limit = 2
		_, err := d.Acquire(ctx, r)
		if (i < 2) != (err == nil) {
			t.Fatalf("permit %d: %v", i, err)
		}
	}
	if l := line(t, ctx, d, cli, key); len(l) != 0 {
		t.Fatalf("a semaphore's line: %q", l)
	}
	if _, err := d.Acquire(ctx, waiter(key, "l", "tl", ttl)); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("a lock's waiter on a semaphore: %v, want the limit mismatch (ErrInvalid)", err)
	}
	if _, err := d.Acquire(ctx, req(key, "lone", ttl)); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("a lone attempt of a lock on a semaphore: %v, want the limit mismatch (ErrInvalid)", err)
	}
	if l := line(t, ctx, d, cli, key); len(l) != 0 {
		t.Fatalf("a refused lock's waiter left %q", l)
	}
}

// TestLineAcrossBackends: Acquire calls on separate backends, made in turn
// while the lock is held, get it in the order of the calls.
func TestLineAcrossBackends(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	open := func() *locker.Locker {
		b, err := dsync.Open(ctx, c.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		l, err := locker.New(b, key, &locker.Options{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := testutil.MustAcquire(t, ctx, open())
	const n = 4
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	for i := range n {
		l := open()
		wg.Go(func() {
			ls, err := l.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			if err := ls.Release(ctx); err != nil {
				errs <- err
			}
		})
		time.Sleep(50 * time.Millisecond) // so that the calls' order is clear
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !slices.Equal(order, []int{0, 1, 2, 3}) {
		t.Fatalf("served in the order %v, want the calls' order", order)
	}
}

// TestLineNoticesNameHeir: a driver's release notices for a lock name the
// first waiter in its line, whichever driver it waits on: at a release, at
// the watch's start when the lock is free, and when the heir leaves a free
// lock; a release with nobody in line names nobody.
func TestLineNoticesNameHeir(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	const key, ttl = "heirs", 5 * time.Second
	holder, _ := newDriver(t, c)
	da, _ := newDriver(t, c)
	db, _ := newDriver(t, c)
	watcher, _ := newDriver(t, c)
	ra, rb := waiter(key, "a", "ta", ttl), waiter(key, "b", "tb", ttl)
	rb.Waiter = fmt.Sprintf("%016x-%s", 2, "b") // behind a

	testutil.MustGrant(t, ctx, holder, req(key, "h", ttl))
	testutil.WantNotAcquired(t, ctx, da, ra)
	sub, err := watcher.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	testutil.Eventually(t, 5*time.Second, "the release watch to read the line", func() bool {
		_, known := etcd.HeirSeen(watcher, key)
		return known
	})
	testutil.WantNotAcquired(t, ctx, db, rb)
	next := func(what string) string {
		t.Helper()
		select {
		case n := <-sub.C():
			return n.Heir
		case <-time.After(3 * time.Second):
			t.Fatalf("no notice after %s", what)
			return ""
		}
	}
	drain := func() {
		for {
			select {
			case <-sub.C():
			default:
				return
			}
		}
	}

	drain()
	if err := holder.Release(ctx, key, "h"); err != nil {
		t.Fatal(err)
	}
	if h := next("the release"); h != ra.Waiter {
		t.Fatalf("the release's notice names %q, want the first waiter %q", h, ra.Waiter)
	}
	if err := da.Leave(ctx, key, ra.Waiter); err != nil {
		t.Fatal(err)
	}
	if h := next("the heir left"); h != rb.Waiter {
		t.Fatalf("after the heir left, the notice names %q, want the next waiter %q", h, rb.Waiter)
	}
	testutil.MustGrant(t, ctx, db, rb)
	drain()
	if err := db.Release(ctx, key, rb.Token); err != nil {
		t.Fatal(err)
	}
	if h := next("the last waiter's release"); h != "" {
		t.Fatalf("a release with nobody in line names %q", h)
	}

	// A watch that starts on a free lock with a line tells its heir.
	testutil.MustGrant(t, ctx, holder, req(key, "h2", ttl))
	testutil.WantNotAcquired(t, ctx, da, ra)
	if err := holder.Release(ctx, key, "h2"); err != nil {
		t.Fatal(err)
	}
	late, _ := newDriver(t, c)
	lsub, err := late.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lsub.Close()
	select {
	case n := <-lsub.C():
		if n.Heir != ra.Waiter {
			t.Fatalf("a watch started on a free lock names %q, want %q", n.Heir, ra.Waiter)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a watch started on a free lock with a waiter told nobody")
	}
	testutil.MustGrant(t, ctx, da, ra)
}
