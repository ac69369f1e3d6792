package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// testServedInOrder: on a driver that serves waiters in order, waiters of
// separate clients (backends) get a released lock in the order in which
// they called Acquire, and a waiter that gave up is skipped and holds
// nothing. Waiters wake only on release notices (their retry delay is
// long), so the order is the driver's, not their timers'.
//
// Under backends.BoundedBarging, a hand-over that outlives
// backends.HandOver lets any waiter take the lock (allowed), which a loaded machine can
// cause: a trial out of order is rerun, up to orderTrials, and the check
// fails only if none comes out in order. With five waiters a driver that
// ignored the order would pass one trial by chance once in 120.
func (s *suite) testServedInOrder(t *testing.T) {
	if caps := lease.Driver(s.backend(t)).Capabilities(); caps.Order == backends.NoOrder {
		t.Skipf("the %s driver does not serve waiters in order", caps.Name)
	}
	if !lease.Driver(s.backend(t)).Capabilities().ReleaseNotices {
		t.Skip("waiters that wake only on their timers cannot be ordered by a release")
	}
	const orderTrials = 3
	var got []string
	for trial := 1; trial <= orderTrials; trial++ {
		order, err := s.orderTrial(t)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(order))
		if slices.IsSorted(order) {
			t.Logf("served in order in trial %d (earlier trials: %v)", trial, got[:trial-1])
			return
		}
	}
	t.Fatalf("waiters served out of their order in all %d trials: %v (want 0 1 3 4; 2 gave up)", orderTrials, got)
}

// orderTrial makes five waiters of separate backends queue behind a
// holder, one after another, has the third give up, releases the lock and
// returns the order in which the others got it.
func (s *suite) orderTrial(t *testing.T) ([]int, error) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	holder := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key, nil))
	const waiters, quitter = 5, 2
	type outcome struct {
		i   int
		err error
	}
	served := make(chan outcome, waiters)
	order := make(chan int, waiters) // who got the lock, in turn
	quitCtx, quit := context.WithCancel(ctx)
	defer quit()
	// A waiter's place lives one TTL past its last attempt, and these
	// attempt only when woken: a TTL that outlasts the queueing of all
	// five on a loaded machine (seconds), so that no place lapses first.
	ttl := max(4*s.h.ShortTTL, 10*time.Second)
	for i := range waiters {
		p := &signalPolicy{delay: time.Minute, waiting: make(chan struct{}, 1)}
		l := newLocker(t, s.backend(t), key, &locker.Options{Retry: p, TTL: ttl})
		wctx := ctx
		if i == quitter {
			wctx = quitCtx
		}
		go func() {
			ls, err := l.Acquire(wctx)
			if err == nil {
				// Sent while holding the lock, so that the lock orders
				// these sends: after the release, the goroutines of two
				// waiters in a row may send in either order.
				order <- i
				err = ls.Release(ctx)
			}
			served <- outcome{i, err}
		}()
		select {
		case <-p.waiting: // refused, in line, asleep
		case o := <-served:
			return nil, fmt.Errorf("waiter %d returned before the release: %v", o.i, o.err)
		}
	}
	quit()
	if o := <-served; o.i != quitter || !errors.Is(o.err, dsync.ErrNotAcquired) || !errors.Is(o.err, context.Canceled) {
		return nil, fmt.Errorf("waiter %d returned %v first, want waiter %d giving up with ErrNotAcquired and context.Canceled", o.i, o.err, quitter)
	}
	if err := holder.Release(ctx); err != nil {
		return nil, err
	}
	for range waiters - 1 {
		if o := <-served; o.err != nil {
			return nil, fmt.Errorf("waiter %d: %v", o.i, o.err)
		}
	}
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	return got, nil
}

// testHandOver: the two contracts of Capabilities.Order. A release with a
// waiter in line keeps the lock for that waiter: an attempt naming no
// waiter is refused at once. Under BoundedBarging the lock is free for
// anybody once backends.HandOver has passed without the heir; under
// StrictOrder it stays the heir's while its place lives (its TTL, here far
// longer than the window). Either way the heir's own attempt then takes
// it.
func (s *suite) testHandOver(t *testing.T) {
	order := lease.Driver(s.backend(t)).Capabilities().Order
	if order == backends.NoOrder {
		t.Skip("the driver keeps no line")
	}
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	holder, heir, other := lease.Driver(s.backend(t)), lease.Driver(s.backend(t)), lease.Driver(s.backend(t))
	ttl := max(4*s.h.ShortTTL, 10*time.Second)
	req := func(token, waiter string) backends.Request {
		return backends.Request{Key: key, Token: token, TTL: ttl, Waiter: waiter}
	}
	const w = "0000000000000001-heir"
	testutil.MustGrant(t, ctx, holder, req("holder", ""))
	testutil.WantNotAcquired(t, ctx, heir, req("heir-1", w))
	if err := holder.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	testutil.WantNotAcquired(t, ctx, other, req("lone-1", ""))
	switch order {
	case backends.BoundedBarging:
		var took time.Time
		testutil.Eventually(t, backends.HandOver+5*time.Second, "a lone attempt to take the lock once the window lapsed", func() bool {
			_, err := other.Acquire(ctx, req("lone-"+testutil.UniqueKey(t), ""))
			took = time.Now()
			return err == nil
		})
		if took.Sub(released) < backends.HandOver {
			t.Fatalf("a lone attempt took the lock %v after its release, within the hand-over window %v", took.Sub(released), backends.HandOver)
		}
	case backends.StrictOrder:
		time.Sleep(2 * backends.HandOver) // a clock to wait out: the window a bounded driver would keep
		testutil.WantNotAcquired(t, ctx, other, req("lone-2", ""))
		testutil.MustGrant(t, ctx, heir, req("heir-2", w))
	default:
		t.Fatalf("unknown order %v", order)
	}
}
