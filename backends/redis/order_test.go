package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// The driver's line of waiters, checked on separate drivers, as separate
// processes would see it: every client has its own connections.

// waiterName is a waiter's name as lease.NewWaiter draws it: 16 hex digits
// of time, then a tag; i orders them.
func waiterName(i int, tag string) string { return fmt.Sprintf("%016x-%s", 1000+i, tag) }

// drivers returns n drivers over srv, each on a client of its own.
func drivers(t *testing.T, srv *redistest.Server, n int) []*redis.Driver {
	t.Helper()
	out := make([]*redis.Driver, n)
	for i := range out {
		out[i], _ = newDriver(t, srv, nil)
	}
	return out
}

var tokens atomic.Int64

// waiterReq is an attempt of waiter on key, fenced or not.
func waiterReq(key, waiter string, fence bool) backends.Request {
	return backends.Request{Key: key, Token: fmt.Sprintf("tok-%s-%d", waiter, tokens.Add(1)), TTL: 10 * time.Second, Fence: fence, Waiter: waiter}
}

// TestWaitersServedInOrder: three waiters, refused in the order c, a, b,
// are served a, b, c (their names' order) as each holder releases; while
// the lock is kept for one of them, the others, and a lone attempt, are
// refused; fencing tokens grow across every hand-over. Fenced and
// unfenced (the unfenced lock's plain SET NX fast path).
func TestWaitersServedInOrder(t *testing.T) {
	for _, fence := range []bool{true, false} {
		t.Run(fmt.Sprintf("fence=%v", fence), func(t *testing.T) {
			srv := redistest.Start(t, nil)
			ctx := testutil.Context(t)
			ds := drivers(t, srv, 5)
			key := testutil.UniqueKey(t)
			names := []string{waiterName(1, "a"), waiterName(2, "b"), waiterName(3, "c")}

			first := backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second, Fence: fence}
			g := testutil.MustGrant(t, ctx, ds[0], first)
			for _, i := range []int{2, 0, 1} {
				testutil.WantNotAcquired(t, ctx, ds[i+1], waiterReq(key, names[i], fence))
			}
			holder, token := backends.Driver(ds[0]), first.Token
			for i, w := range names {
				if err := holder.Release(ctx, key, token); err != nil {
					t.Fatalf("release before %s's turn: %v", w, err)
				}
				testutil.WantNotAcquired(t, ctx, ds[4], backends.Request{Key: key, Token: "lone", TTL: time.Second, Fence: fence})
				for j := len(names) - 1; j > i; j-- {
					testutil.WantNotAcquired(t, ctx, ds[j+1], waiterReq(key, names[j], fence))
				}
				r := waiterReq(key, w, fence)
				next := testutil.MustGrant(t, ctx, ds[i+1], r)
				if fence && next.Fence <= g.Fence {
					t.Fatalf("%s's fencing token %d is not above the previous %d", w, next.Fence, g.Fence)
				}
				g, holder, token = next, ds[i+1], r.Token
			}
			if err := holder.Release(ctx, key, token); err != nil {
				t.Fatal(err)
			}
			// The line is empty: the lock is free at once.
			lone := testutil.MustGrant(t, ctx, ds[4], backends.Request{Key: key, Token: "lone", TTL: time.Second, Fence: fence})
			if fence && lone.Fence <= g.Fence {
				t.Fatalf("fencing token %d after the line is not above %d", lone.Fence, g.Fence)
			}
			_ = ds[4].Release(ctx, key, "lone")
			if keys := srv.NewClient(t).Keys(ctx, "*"+key+"*").Val(); len(keys) != 0 {
				t.Errorf("left behind after every waiter was served: %v", keys)
			}
		})
	}
}

// TestReservationIgnoredByHolder: a lock kept for a waiter is not held:
// Holder says ErrNotHeld, and neither Refresh nor Release of any token
// touches it.
func TestReservationIgnoredByHolder(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 2)
	key := testutil.UniqueKey(t)
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", Value: []byte("v"), TTL: 10 * time.Second, Fence: true})
	w := waiterName(1, "w")
	testutil.WantNotAcquired(t, ctx, ds[1], waiterReq(key, w, true))
	if err := ds[0].Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	if info, err := ds[0].Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a lock kept for a waiter = %+v, %v; want ErrNotHeld", info, err)
	}
	for _, tok := range []string{"holder", "\r" + w, w} {
		if err := ds[0].Refresh(ctx, key, tok, time.Second); err == nil {
			t.Errorf("Refresh(%q) of a lock kept for a waiter succeeded", tok)
		}
		if err := ds[0].Release(ctx, key, tok); err == nil {
			t.Errorf("Release(%q) of a lock kept for a waiter succeeded", tok)
		}
	}
	testutil.MustGrant(t, ctx, ds[1], waiterReq(key, w, true))
}

// TestHandOverWindowLapses: a waiter that does not come within the
// hand-over window loses its turn: the lock is free for anyone.
func TestHandOverWindowLapses(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 3)
	key := testutil.UniqueKey(t)
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second})
	testutil.WantNotAcquired(t, ctx, ds[1], waiterReq(key, waiterName(1, "slow"), false))
	if err := ds[0].Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	testutil.WantNotAcquired(t, ctx, ds[2], backends.Request{Key: key, Token: "lone", TTL: time.Second})
	time.Sleep(backends.HandOver + 20*time.Millisecond)
	testutil.MustGrant(t, ctx, ds[2], backends.Request{Key: key, Token: "lone", TTL: time.Second})
}

// TestLapsedHeirPassesInLine: when the heir of a release lets its window
// lapse, a waiter behind the next live one that comes first does not take
// the free lock: it is kept for the one ahead (its client woken by the
// notice naming it), and the later one stays in line for its own turn.
// Fenced and unfenced.
func TestLapsedHeirPassesInLine(t *testing.T) {
	for _, fence := range []bool{true, false} {
		t.Run(fmt.Sprintf("fence=%v", fence), func(t *testing.T) {
			srv := redistest.Start(t, nil)
			c := srv.NewClient(t)
			ctx := testutil.Context(t)
			ds := drivers(t, srv, 4)
			key := testutil.UniqueKey(t)
			testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second, Fence: fence})
			names := []string{waiterName(1, "heir"), waiterName(2, "next"), waiterName(3, "last")}
			for i, w := range names {
				testutil.WantNotAcquired(t, ctx, ds[i+1], waiterReq(key, w, fence))
			}
			sub, err := ds[2].WatchReleases(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := ds[0].Release(ctx, key, "holder"); err != nil {
				t.Fatal(err)
			}
			held := func() string { return c.Get(ctx, "dsync:{"+key+"}").Val() }
			testutil.Eventually(t, 10*time.Second, "the heir's window to lapse", func() bool { return held() != "\r"+names[0] })
			for len(sub.C()) > 0 { // nothing so far names it
				<-sub.C()
			}
			testutil.WantNotAcquired(t, ctx, ds[3], waiterReq(key, names[2], fence))
			if v := held(); v != "\r"+names[1] {
				t.Fatalf("the lock holds %q, want it kept for %s, the next live waiter", v, names[1])
			}
			select {
			case <-sub.C():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s's client was not woken", names[1])
			}
			testutil.WantNotAcquired(t, ctx, ds[0], backends.Request{Key: key, Token: "lone", TTL: time.Second, Fence: fence})
			r := waiterReq(key, names[1], fence)
			testutil.MustGrant(t, ctx, ds[2], r)
			if err := ds[2].Release(ctx, key, r.Token); err != nil {
				t.Fatal(err)
			}
			testutil.MustGrant(t, ctx, ds[3], waiterReq(key, names[2], fence))
		})
	}
}

// TestDeadWaiterSkipped: a waiter whose place lapsed (its TTL passed with
// no attempt: its process died) no longer holds up the hand-over, which
// goes to the next live waiter.
func TestDeadWaiterSkipped(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 3)
	key := testutil.UniqueKey(t)
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second, Fence: true})
	dead := waiterReq(key, waiterName(1, "dead"), true)
	dead.TTL = 30 * time.Millisecond
	testutil.WantNotAcquired(t, ctx, ds[1], dead)
	live := waiterName(2, "live")
	testutil.WantNotAcquired(t, ctx, ds[2], waiterReq(key, live, true))
	time.Sleep(dead.TTL + 20*time.Millisecond)
	if err := ds[0].Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, ds[2], waiterReq(key, live, true))
}

// TestLeavePassesReservation: a waiter that leaves while the lock is kept
// for it passes it to the next waiter in line; one that leaves from
// further back just loses its place; the last to leave frees the lock.
func TestLeavePassesReservation(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 4)
	key := testutil.UniqueKey(t)
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second, Fence: true})
	a, b, c := waiterName(1, "a"), waiterName(2, "b"), waiterName(3, "c")
	for i, w := range []string{a, b, c} {
		testutil.WantNotAcquired(t, ctx, ds[i+1], waiterReq(key, w, true))
	}
	if err := ds[2].Leave(ctx, key, b); err != nil {
		t.Fatalf("Leave from the middle of the line: %v", err)
	}
	if err := ds[0].Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	testutil.WantNotAcquired(t, ctx, ds[3], waiterReq(key, c, true))
	if err := ds[1].Leave(ctx, key, a); err != nil {
		t.Fatalf("Leave with the lock kept for it: %v", err)
	}
	testutil.WantNotAcquired(t, ctx, ds[0], backends.Request{Key: key, Token: "lone", TTL: time.Second, Fence: true})
	if err := ds[3].Leave(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "lone", TTL: time.Second, Fence: true})
	if err := ds[0].Leave(ctx, key, "Bad"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Leave with an invalid waiter name = %v, want ErrInvalid", err)
	}
}

// TestSemaphoreKeepsNoLine: a semaphore's attempts ignore Waiter: a full
// one leaves no line behind, and a release frees the slot for anyone.
func TestSemaphoreKeepsNoLine(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 3)
	key := testutil.UniqueKey(t)
	sem := func(tok, waiter string) backends.Request {
		return backends.Request{Key: key, Token: tok, TTL: 10 * time.Second, Limit: 2, Fence: true, Waiter: waiter}
	}
	testutil.MustGrant(t, ctx, ds[0], sem("s0", ""))
	testutil.MustGrant(t, ctx, ds[0], sem("s1", ""))
	testutil.WantNotAcquired(t, ctx, ds[1], sem("w1", waiterName(1, "w")))
	for _, k := range srv.NewClient(t).Keys(ctx, "*"+key+"*").Val() {
		if strings.Contains(k, ":line") || strings.Contains(k, ":w:") {
			t.Errorf("a semaphore's refusal left a line behind: %s", k)
		}
	}
	if err := ds[0].Release(ctx, key, "s0"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, ds[2], sem("lone", ""))
}

// TestNoticeNamesTheHeir: a release that keeps the lock for a waiter
// tells every watcher, in every driver, whom it is kept for (drivers keep
// no record of who waits); a release that finds only lapsed places in line
// tells them the lock is free, and one with nobody in line tells nobody.
func TestNoticeNamesTheHeir(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	ds := drivers(t, srv, 3)
	key := testutil.UniqueKey(t)
	testutil.MustGrant(t, ctx, ds[0], backends.Request{Key: key, Token: "holder", TTL: 10 * time.Second, Fence: true})
	a, b := waiterName(1, "a"), waiterName(2, "b")
	testutil.WantNotAcquired(t, ctx, ds[1], waiterReq(key, a, true))
	testutil.WantNotAcquired(t, ctx, ds[2], waiterReq(key, b, true))
	subs := make([]backends.Subscription, len(ds))
	for i, d := range ds {
		s, err := d.WatchReleases(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	// A SUBSCRIBE is only written when WatchReleases returns: a PING on
	// the shared connection's server orders nothing, so wait for the
	// server to count the three watchers' one subscription each.
	admin := srv.NewClient(t)
	channel := "dsync:{" + key + "}:released"
	testutil.Eventually(t, 5*time.Second, "the subscriptions", func() bool {
		return admin.PubSubNumSub(ctx, channel).Val()[channel] == 3
	})
	notice := func(i int, within time.Duration) (backends.Notice, bool) {
		select {
		case n := <-subs[i].C():
			return n, true
		case <-time.After(within):
			return backends.Notice{}, false
		}
	}
	if err := ds[0].Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		if n, ok := notice(i, 5*time.Second); !ok || n.Heir != a {
			t.Errorf("driver %d: notice %+v (received %v) after a release that kept the lock for a, want one naming a", i, n, ok)
		}
	}
	r := waiterReq(key, a, true)
	testutil.MustGrant(t, ctx, ds[1], r)
	// b's place lapses (as when b died): the release finds nobody live in
	// line, frees the lock, and tells every watcher.
	if err := admin.Del(ctx, "dsync:{"+key+"}:w:"+b).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Release(ctx, key, r.Token); err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		if n, ok := notice(i, 5*time.Second); !ok || n.Heir != "" {
			t.Errorf("driver %d: notice %+v (received %v) after a release that left the lock free, want one naming no heir", i, n, ok)
		}
	}
	// That release took b out of the line: nobody waits, and the next
	// release tells nobody.
	r = backends.Request{Key: key, Token: "holder-2", TTL: 10 * time.Second}
	testutil.MustGrant(t, ctx, ds[0], r)
	if err := ds[0].Release(ctx, key, r.Token); err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		if n, ok := notice(i, 100*time.Millisecond); ok {
			t.Errorf("driver %d: notice %+v after a release that nobody waited for", i, n)
		}
	}
}
