package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/retry"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// testConfig returns the configuration of a lock on key over d, with a
// TTL of 1s.
func testConfig(t *testing.T, d backends.Driver, key string, opts *Options) *Config {
	t.Helper()
	b := testutil.NewBackend(t, d)
	if opts == nil {
		opts = &Options{}
	}
	opts.TTL = time.Second
	c, err := New(b, Lock, key, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLateTimerStillReportsLoss: a process paused past its validity (its
// timer not fired yet when it resumes) learns of the loss from Err,
// Validity, Extend and Release at once.
func TestLateTimerStillReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		l, err := testConfig(t, testutil.MemoryDriver(t, nil), "k", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		l.timer.Stop() // as if the process were paused: the timer fires late
		l.mu.Unlock()
		time.Sleep(2 * time.Second)
		if err := l.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
			t.Fatalf("Err after the validity ran out = %v, want ErrLeaseLost", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done not closed once Err reported the loss")
		}
		if v := l.Validity(); v != 0 {
			t.Errorf("Validity = %v, want 0", v)
		}
		if err := l.Extend(ctx); !errors.Is(err, dsync.ErrLeaseLost) {
			t.Errorf("Extend = %v, want ErrLeaseLost", err)
		}
		if err := l.Release(ctx); !errors.Is(err, dsync.ErrNotHeld) || !errors.Is(err, dsync.ErrLeaseLost) {
			t.Errorf("Release = %v, want ErrNotHeld wrapping ErrLeaseLost", err)
		}
	})
}

// TestDoneClosesWhenValidityRunsOut: Done, asked for before the validity
// runs out, is closed when it does; asked for after, it is closed already.
func TestDoneClosesWhenValidityRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := testutil.MemoryDriver(t, nil)
		early, err := testConfig(t, d, "early", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		late, err := testConfig(t, d, "late", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := early.Done()
		time.Sleep(500 * time.Millisecond)
		select {
		case <-done:
			t.Fatal("Done closed while valid")
		default:
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Done not closed when the validity ran out")
		}
		if !errors.Is(early.Err(), dsync.ErrLeaseLost) {
			t.Fatalf("Err = %v, want ErrLeaseLost", early.Err())
		}
		select {
		case <-late.Done():
		default:
			t.Fatal("Done, first asked after the validity ran out, is not closed")
		}
		if !errors.Is(late.Err(), dsync.ErrLeaseLost) {
			t.Fatalf("Err = %v, want ErrLeaseLost", late.Err())
		}
	})
}

// releasingNotifier releases a hold as the waiter subscribes: the release
// falls between the waiter's failed attempt and its subscription.
type releasingNotifier struct {
	backends.Driver
	release func()
}

func (n *releasingNotifier) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	n.release()
	return n.Driver.WatchReleases(ctx, key)
}

// TestAcquireAttemptsAgainAfterSubscribing: a release that no notice
// reports (it came before the subscription) is found by the attempt made
// right after subscribing, not after the retry delay.
func TestAcquireAttemptsAgainAfterSubscribing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := testutil.MemoryDriver(t, nil)
		holder, err := testConfig(t, d, "k", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := &releasingNotifier{Driver: d, release: func() { _ = holder.Release(ctx) }}
		slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := testConfig(t, n, "k", &Options{Retry: slow}).Acquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		if waited := time.Since(start); waited > 0 {
			t.Errorf("Acquire waited %v after a release it could see at once", waited)
		}
	})
}

// watchCounter counts subscriptions to release notices, and their Close.
type watchCounter struct {
	backends.Driver
	watches, closes atomic.Int32
}

func (w *watchCounter) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	w.watches.Add(1)
	sub, err := w.Driver.WatchReleases(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countedSub{Subscription: sub, closes: &w.closes}, nil
}

type countedSub struct {
	backends.Subscription
	closes *atomic.Int32
}

func (s *countedSub) Close() { s.closes.Add(1); s.Subscription.Close() }

// TestLineSharesSubscription: the waiters of one process hand the key's
// release notices down their line: two waiters served one after the other
// subscribe once, each is woken by the notice of the release before it
// (no retry delay), and the subscription ends lingerFor after the line.
func TestLineSharesSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := &watchCounter{Driver: testutil.MemoryDriver(t, nil)}
		slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c := testConfig(t, d, "k", &Options{Retry: slow})
		holder, err := c.Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := make(chan *Lease, 2)
		for range 2 {
			go func() {
				l, err := c.Acquire(ctx, nil)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			synctest.Wait() // the first waiter heads the line before the second joins
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first := <-got
		synctest.Wait() // the second waiter, now at the head, meets first's hold
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second := <-got
		defer second.Release(ctx)
		if waited := time.Since(start); waited > 0 {
			t.Errorf("the waiters took %v: a notice was missed and a retry delay waited out", waited)
		}
		synctest.Wait()
		if n := d.watches.Load(); n != 1 {
			t.Errorf("%d subscriptions for one line of two waiters, want 1", n)
		}
		if n := d.closes.Load(); n != 0 {
			t.Errorf("%d subscriptions closed as the line ended, want 0 (kept for lingerFor)", n)
		}
		time.Sleep(lingerFor)
		synctest.Wait()
		if n := d.closes.Load(); n != 1 {
			t.Errorf("%d subscriptions closed lingerFor after the line ended, want 1", n)
		}
	})
}

// hookedWatch runs hook as a waiter subscribes.
type hookedWatch struct {
	backends.Driver
	hook func()
}

func (h *hookedWatch) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	h.hook()
	return h.Driver.WatchReleases(ctx, key)
}

// TestWaiterJoinsDuringSubscribe: a waiter that joins the line while its
// head subscribes keeps its place, and is served after the head.
func TestWaiterJoinsDuringSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *Lease, 2)
		acquire := func(c *Config) {
			l, err := c.Acquire(ctx, nil)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}
		d := &hookedWatch{Driver: testutil.MemoryDriver(t, nil)}
		c := testConfig(t, d, "k", &Options{Retry: slow})
		joined := false
		d.hook = func() {
			if !joined {
				joined = true
				go acquire(c)
				for !inLine(c, 1) { // the second waiter joins the line
					time.Sleep(time.Millisecond)
				}
			}
		}
		holder, err := c.Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go acquire(c)
		synctest.Wait()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			l := <-got
			if l == nil {
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// inLine reports whether n waiters stand behind the head of c.Key's line.
func inLine(c *Config, n int) bool {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	l := c.lines.m[c.Key]
	return l != nil && len(l.turns) == n
}

// attemptCounter counts acquisition attempts.
type attemptCounter struct {
	*watchCounter
	attempts atomic.Int32
}

func (a *attemptCounter) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	a.attempts.Add(1)
	return a.watchCounter.Acquire(ctx, req)
}

// TestIdleSubscriptionServesNextAcquire: a process's next Acquire of a key
// within lingerFor of the end of its line uses the line's subscription:
// it subscribes no more, makes no second attempt on meeting the lock
// held (no release can have slipped by), is not woken by a notice that
// came before its first attempt, and is woken by the release after it.
// The subscription is closed lingerFor after the last line ends, and at
// once when the backend closes.
func TestIdleSubscriptionServesNextAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := &attemptCounter{watchCounter: &watchCounter{Driver: testutil.MemoryDriver(t, nil)}}
		slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		b := testutil.NewBackend(t, d)
		c, err := New(b, Lock, "k", 1, &Options{TTL: time.Minute, Retry: slow})
		if err != nil {
			t.Fatal(err)
		}
		other, err := New(testutil.NewBackend(t, d.Driver), Lock, "k", 1, &Options{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// contend has another process hold the lock while this one
		// acquires it, and release it once this one waits.
		contend := func() {
			t.Helper()
			holder, err := other.Attempt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, nil)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			synctest.Wait()
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l := <-got; l != nil {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		contend()
		if w, a := d.watches.Load(), d.attempts.Load(); w != 1 || a != 3 {
			t.Fatalf("first contended Acquire: %d subscriptions and %d attempts, want 1 and 3", w, a)
		}
		// A notice left from before: the next Acquire's first attempt
		// sees what it would say.
		if l, err := other.Attempt(ctx); err != nil {
			t.Fatal(err)
		} else if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		start := time.Now()
		contend()
		if w, a := d.watches.Load(), d.attempts.Load()-3; w != 1 || a != 2 {
			t.Errorf("next contended Acquire: %d subscriptions in all and %d attempts, want 1 and 2", w, a)
		}
		if waited := time.Since(start); waited > 0 {
			t.Errorf("the next Acquire took %v: its release notice was missed", waited)
		}
		time.Sleep(lingerFor / 2)
		contend() // keeps the subscription lingerFor more
		time.Sleep(lingerFor * 3 / 4)
		synctest.Wait()
		if n := d.closes.Load(); n != 0 {
			t.Fatalf("subscription closed %v after its last use, before lingerFor", lingerFor*3/4)
		}
		time.Sleep(lingerFor / 4)
		synctest.Wait()
		if n := d.closes.Load(); n != 1 {
			t.Fatalf("%d subscriptions closed lingerFor after the last use, want 1", n)
		}
		contend()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if n := d.closes.Load(); n != 2 {
			t.Errorf("%d subscriptions closed once the backend was, want 2", n)
		}
	})
}
