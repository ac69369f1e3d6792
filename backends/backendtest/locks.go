package backendtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/retry"
)

func newLocker(t testing.TB, b *dsync.Backend, key string, opts *locker.Options) *locker.Locker {
	t.Helper()
	l, err := locker.New(b, key, opts)
	if err != nil {
		t.Fatalf("locker.New(%q): %v", key, err)
	}
	return l
}

func (s *suite) short() *locker.Options { return &locker.Options{TTL: s.h.ShortTTL} }

func (s *suite) testExclusive(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	l1 := newLocker(t, s.backend(t), key, nil)
	l2 := newLocker(t, s.backend(t), key, nil)
	ls := testutil.MustAcquire(t, ctx, l1)
	testutil.WantLocked(t, ctx, l2)
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	ls2 := testutil.MustAcquire(t, ctx, l2)
	testutil.WantLocked(t, ctx, l1)
	if err := ls2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func (s *suite) testNotReentrant(t *testing.T) {
	ctx := testutil.Context(t)
	l := newLocker(t, s.backend(t), testutil.UniqueKey(t), nil)
	ls := testutil.MustAcquire(t, ctx, l)
	defer ls.Release(ctx)
	testutil.WantLocked(t, ctx, l)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a lock the same locker holds: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

func (s *suite) testOnlyOwner(t *testing.T) {
	ctx := testutil.Context(t)
	b := s.backend(t)
	key := testutil.UniqueKey(t)
	l := newLocker(t, b, key, &locker.Options{Value: []byte("owner")})
	ls := testutil.MustAcquire(t, ctx, l)
	d := lease.Driver(s.backend(t))
	if err := d.Refresh(ctx, key, "not-the-token", s.h.ShortTTL); !errors.Is(err, dsync.ErrNotHeld) {
		t.Errorf("Refresh with another token: %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, key, "not-the-token"); !errors.Is(err, dsync.ErrNotHeld) {
		t.Errorf("Release with another token: %v, want ErrNotHeld", err)
	}
	if h, err := d.Holder(ctx, key); err != nil || string(h.Value) != "owner" {
		t.Errorf("Holder after foreign refresh/release: %q, %v; want the owner's hold intact", h.Value, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("owner Release: %v", err)
	}
}

func (s *suite) testExpiryFrees(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	ls := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key, s.short()))
	l2 := newLocker(t, s.backend(t), key, s.short())
	ls2, err := l2.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after the first lease's TTL: %v", err)
	}
	defer ls2.Release(ctx)
	if got, exp := time.Now(), ls.Expires(); got.Before(exp) {
		t.Errorf("second lease granted %v before the first lease's validity ended", exp.Sub(got))
	}
	select {
	case <-ls.Done():
	case <-time.After(10 * s.h.ShortTTL):
		t.Fatal("expired lease's Done not closed")
	}
	if err := ls.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
		t.Errorf("expired lease Err: %v, want ErrLeaseLost", err)
	}
	if v := ls.Validity(); v != 0 {
		t.Errorf("expired lease Validity: %v, want 0", v)
	}
}

func (s *suite) testExtendKeepsHold(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	ttl := s.h.ShortTTL
	l := newLocker(t, s.backend(t), key, s.short())
	// A lease whose acquisition took most of its short TTL (a loaded
	// machine) may run out before the first Extend: that judges nothing
	// about extension, so such a lease is let go and another one taken.
	ls := testutil.MustAcquire(t, ctx, l)
	for try := 1; ls.Validity() < ttl/2; try++ {
		if try == 5 {
			t.Fatalf("5 leases of TTL %v in a row came with less than half of it left (%v): the machine is too slow to judge", ttl, ls.Validity())
		}
		_ = ls.Release(ctx)
		ls = testutil.MustAcquire(t, ctx, l)
	}
	other := newLocker(t, s.backend(t), key, s.short())
	start := time.Now()
	for time.Since(start) < 3*ttl {
		before := ls.Expires()
		if err := ls.Extend(ctx); err != nil {
			t.Fatalf("Extend after %v: %v", time.Since(start), err)
		}
		if !ls.Expires().After(before) {
			t.Fatalf("Extend did not move Expires forward (%v)", before)
		}
		testutil.WantLocked(t, ctx, other)
		time.Sleep(ttl / 4) // the cadence under test, not a wait for a condition
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("extended lease Err: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func (s *suite) testAutoExtendBounded(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	ttl := s.h.ShortTTL

	t.Run("manual", func(t *testing.T) {
		ls := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key+"/manual", &locker.Options{TTL: ttl, MaxExtensions: 1}))
		defer ls.Release(ctx)
		if err := ls.Extend(ctx); err != nil {
			t.Fatalf("first Extend: %v", err)
		}
		if err := ls.Extend(ctx); !errors.Is(err, dsync.ErrExtendLimit) {
			t.Fatalf("Extend past MaxExtensions: %v, want ErrExtendLimit", err)
		}
		if err := ls.Err(); err != nil {
			t.Fatalf("lease ended by a refused extension: %v", err)
		}
	})

	t.Run("auto", func(t *testing.T) {
		start := time.Now()
		l := newLocker(t, s.backend(t), key, &locker.Options{TTL: ttl, AutoExtend: true, MaxExtensions: 2})
		ls := testutil.MustAcquire(t, ctx, l)
		other := newLocker(t, s.backend(t), key, s.short())
		select {
		case <-ls.Done():
		case <-time.After(10 * ttl):
			t.Fatal("auto-extended lease with MaxExtensions 2 never ended")
		}
		if ended := time.Since(start); ended < ttl {
			t.Errorf("lease ended after %v, before one TTL (%v): it was not extended", ended, ttl)
		}
		if err := ls.Err(); !errors.Is(err, dsync.ErrLeaseLost) || !strings.Contains(err.Error(), "extension") {
			t.Errorf("Err after the bound: %v, want ErrLeaseLost naming the extension bound", err)
		}
		ls2, err := other.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire after the bounded lease ended: %v", err)
		}
		_ = ls2.Release(ctx)
		if err := ls.Release(ctx); !errors.Is(err, dsync.ErrNotHeld) {
			t.Errorf("Release of the lost lease: %v, want ErrNotHeld", err)
		}
	})
}

func (s *suite) testReleaseAfterExpiry(t *testing.T) {
	ctx := testutil.Context(t)
	ls := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), testutil.UniqueKey(t), s.short()))
	select {
	case <-ls.Done():
	case <-time.After(10 * s.h.ShortTTL):
		t.Fatal("lease never expired")
	}
	// The local validity ends before the server's TTL; wait until the
	// server has let the hold go too.
	d := lease.Driver(s.backend(t))
	testutil.Eventually(t, 10*s.h.ShortTTL, "hold expired on the server", func() bool {
		_, err := d.Holder(ctx, ls.Key())
		return errors.Is(err, dsync.ErrNotHeld)
	})
	if err := ls.Release(ctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("Release after expiry: %v, want ErrNotHeld", err)
	}
	if err := ls.Extend(ctx); !errors.Is(err, dsync.ErrNotHeld) && !errors.Is(err, dsync.ErrLeaseLost) {
		t.Fatalf("Extend after expiry: %v, want ErrLeaseLost", err)
	}
}

func (s *suite) testFencesIncrease(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	lockers := []*locker.Locker{newLocker(t, s.backend(t), key, nil), newLocker(t, s.backend(t), key, nil)}
	fencing := lease.Driver(s.backend(t)).Capabilities().Fencing
	var last uint64
	for i := range 20 {
		ls := testutil.MustAcquire(t, ctx, lockers[i%2])
		tok := ls.Token()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !fencing {
			if tok != 0 {
				t.Fatalf("backend without fencing returned token %d", tok)
			}
			continue
		}
		if tok <= last {
			t.Fatalf("acquisition %d: token %d not above the previous %d", i, tok, last)
		}
		last = tok
	}
	noFence := newLocker(t, s.backend(t), key, &locker.Options{NoFencing: true})
	ls := testutil.MustAcquire(t, ctx, noFence)
	defer ls.Release(ctx)
	if ls.Token() != 0 {
		t.Errorf("NoFencing lease has token %d, want 0", ls.Token())
	}
}

func (s *suite) testCancel(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	holder := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key, nil))
	waiter := newLocker(t, s.backend(t), key, nil)

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := waiter.Acquire(cctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v, want ErrNotAcquired and context.Canceled", err)
	}
	dctx, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := waiter.Acquire(dctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out Acquire: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing may be left held by the cancelled waiter.
	ls := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key, nil))
	_ = ls.Release(ctx)
}

func (s *suite) testKeyIsolation(t *testing.T) {
	ctx := testutil.Context(t)
	base := testutil.UniqueKey(t)
	b1, b2 := s.backend(t), s.backend(t)
	keys := []string{base, base + "/sub", base + ":fence", base + "}", "{" + base, base + ":released", strings.ToUpper(base)}
	var leases []dsync.Lease
	for i, k := range keys {
		b := b1
		if i%2 == 1 {
			b = b2
		}
		leases = append(leases, testutil.MustAcquire(t, ctx, newLocker(t, b, k, nil)))
	}
	for i, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("Release %q: %v", keys[i], err)
		}
	}
}

func (s *suite) testHolderValue(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	ttl := 5 * s.h.ShortTTL
	l := newLocker(t, s.backend(t), key, &locker.Options{TTL: ttl, Value: []byte("candidate-7")})
	if _, err := l.Holder(ctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("Holder of a free lock: %v, want ErrNotHeld", err)
	}
	ls := testutil.MustAcquire(t, ctx, l)
	h, err := newLocker(t, s.backend(t), key, nil).Holder(ctx)
	if err != nil || string(h.Value) != "candidate-7" || h.TTL <= 0 || h.TTL > ls.(interface{ TTL() time.Duration }).TTL() {
		t.Fatalf("Holder: value %q ttl %v err %v; want candidate-7 with 0 < ttl <= %v", h.Value, h.TTL, err, ttl)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holder(ctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("Holder after Release: %v, want ErrNotHeld", err)
	}
}

// testHammer runs many goroutines over several clients on one key; the
// number inside the critical section must never exceed 1, and fencing
// tokens must grow in the order the sections ran.
func (s *suite) testHammer(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	const clients, perClient, rounds = 3, 3, 15
	var (
		inside     atomic.Int32
		violations atomic.Int32
		mu         sync.Mutex // protects lastToken and count
		lastToken  uint64
		count      int
		wg         sync.WaitGroup
		errs       = make(chan error, clients*perClient)
	)
	for range clients {
		l := newLocker(t, s.backend(t), key, &locker.Options{TTL: 10 * time.Second})
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ls, err := l.Acquire(ctx)
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						violations.Add(1)
					}
					mu.Lock()
					if tok := ls.Token(); tok != 0 && tok <= lastToken {
						violations.Add(1)
					} else if tok != 0 {
						lastToken = tok
					}
					count++
					mu.Unlock()
					inside.Add(-1)
					if err := ls.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("hammer: %v", err)
	}
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d mutual-exclusion or fencing violations", v)
	}
	if count != clients*perClient*rounds {
		t.Fatalf("%d critical sections ran, want %d", count, clients*perClient*rounds)
	}
}

// signalPolicy is a retry policy with a long fixed delay that reports when a
// waiter is about to sleep after a failed attempt.
type signalPolicy struct {
	delay   time.Duration
	waiting chan struct{}
}

func (p *signalPolicy) Start() retry.Backoff { return p }

func (p *signalPolicy) Next() (time.Duration, bool) {
	select {
	case p.waiting <- struct{}{}:
	default:
	}
	return p.delay, true
}

func (s *suite) testWake(t *testing.T) {
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	b := s.backend(t)
	if !lease.Driver(b).Capabilities().ReleaseNotices {
		t.Skipf("the %s driver offers no release wake-ups", lease.Driver(b).Capabilities().Name)
	}
	holder := testutil.MustAcquire(t, ctx, newLocker(t, s.backend(t), key, nil))
	const retryDelay = 30 * time.Second
	p := &signalPolicy{delay: retryDelay, waiting: make(chan struct{}, 1)}
	waiter := newLocker(t, b, key, &locker.Options{Retry: p})
	got := make(chan error, 1)
	go func() {
		ls, err := waiter.Acquire(ctx)
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	<-p.waiting // the waiter failed once and is sleeping
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		t.Logf("waiter acquired %v after the release", time.Since(released))
	case <-time.After(retryDelay / 3):
		t.Fatalf("waiter not woken by the release within %v (its retry delay is %v)", retryDelay/3, retryDelay)
	}
}

// driverTTL is a TTL for a hold made on the driver directly: long enough
// for a few calls, within the driver's bounds.
func (s *suite) driverTTL(d backends.Driver) time.Duration {
	ttl := 4 * s.h.ShortTTL
	if m := d.Capabilities().MaxTTL; m > 0 {
		ttl = min(ttl, m)
	}
	return ttl
}

// testPlainContention: the driver answers an attempt on a held lock with
// the bare ErrNotAcquired, as the SPI says, and leaves nothing behind.
func (s *suite) testPlainContention(t *testing.T) {
	ctx := testutil.Context(t)
	d := lease.Driver(s.backend(t))
	req := backends.Request{Key: testutil.UniqueKey(t), Token: "holder", TTL: s.driverTTL(d), Fence: true}
	if _, err := d.Acquire(ctx, req); err != nil {
		t.Fatalf("Acquire on a free key: %v", err)
	}
	t.Cleanup(func() { _ = d.Release(context.WithoutCancel(ctx), req.Key, "holder") })
	req.Token = "contender"
	if _, err := d.Acquire(ctx, req); err != backends.ErrNotAcquired {
		t.Fatalf("Acquire on a held lock: %v, want the bare backends.ErrNotAcquired", err)
	}
	if err := d.Release(ctx, req.Key, "contender"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release of the refused token: %v, want ErrNotHeld (nothing left behind)", err)
	}
}
