package lease

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/retry"
)

// TestWaitNoticeWakesOnlyItsWaiter: a wait ends on a notice naming no heir
// or the waiter, not on one naming another heir (that heir alone can take
// the lock), and otherwise when its delay is out or ctx ends.
func TestWaitNoticeWakesOnlyItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const me = "0000000000000002-me"
		for _, tc := range []struct {
			heir string
			wake bool
		}{{"", true}, {me, true}, {"0000000000000001-other", false}} {
			notices := make(chan backends.Notice, 1)
			notices <- backends.Notice{Heir: tc.heir}
			start := time.Now()
			if err := waitNotice(t.Context(), time.Minute, notices, me); err != nil {
				t.Fatal(err)
			}
			if woken := time.Since(start) < time.Minute; woken != tc.wake {
				t.Errorf("a notice naming %q: woken at once %v, want %v", tc.heir, woken, tc.wake)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := waitNotice(ctx, time.Minute, nil, me); err != context.DeadlineExceeded {
			t.Errorf("wait with ctx ending first: %v, want context.DeadlineExceeded", err)
		}
	})
}

// waiterRecorder records the waiter each attempt names, and each Leave.
type waiterRecorder struct {
	backends.Driver
	mu     sync.Mutex
	named  []string
	leaves []string
}

func (r *waiterRecorder) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	r.mu.Lock()
	r.named = append(r.named, req.Waiter)
	r.mu.Unlock()
	return r.Driver.Acquire(ctx, req)
}

func (r *waiterRecorder) Leave(ctx context.Context, key, waiter string) error {
	r.mu.Lock()
	r.leaves = append(r.leaves, waiter)
	r.mu.Unlock()
	return r.Driver.Leave(ctx, key, waiter)
}

// take returns the waiters named since the last take, and the Leaves.
func (r *waiterRecorder) take() (named, leaves []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	named, leaves = r.named, r.leaves
	r.named, r.leaves = nil, nil
	return named, leaves
}

// recordedLock returns lock "k" of a process whose attempts and Leaves rec
// records (retrying only after an hour, so that only a release notice
// wakes it), and the same lock of another process, on one memory driver.
func recordedLock(t *testing.T) (rec *waiterRecorder, c, other *Config) {
	t.Helper()
	rec = &waiterRecorder{Driver: testutil.MemoryDriver(t, nil)}
	slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err = New(testutil.NewBackend(t, rec), Lock, "k", 1, &Options{TTL: time.Minute, Retry: slow})
	if err != nil {
		t.Fatal(err)
	}
	other, err = New(testutil.NewBackend(t, rec.Driver), Lock, "k", 1, &Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return rec, c, other
}

// TestAcquireKeepsItsPlace: the lease alone decides when an attempt is in
// the backend's line. An uncontended Acquire names no waiter; a contended
// one's first refusal is followed at once by an attempt naming the call's
// waiter, and every later attempt names the same; the next Acquire of a
// key contended a moment ago (its notices kept) names its waiter from the
// first attempt; an Acquire that gives up after an attempt in line leaves
// the line, and one that never joined it does not.
func TestAcquireKeepsItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		rec, c, other := recordedLock(t)
		l, err := c.Acquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if named, _ := rec.take(); !slices.Equal(named, []string{""}) {
			t.Fatalf("uncontended Acquire named %q, want one attempt naming no waiter", named)
		}

		contended := func(what string, giveUp bool) (named, leaves []string) {
			t.Helper()
			holder, err := other.Attempt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				l, err := c.Acquire(actx, nil)
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			synctest.Wait()
			if giveUp {
				cancel()
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; (err != nil) != giveUp {
				t.Fatalf("%s: Acquire: %v", what, err)
			}
			return rec.take()
		}
		named, _ := contended("first contended Acquire", false)
		if len(named) != 3 || named[0] != "" || named[1] == "" || named[2] != named[1] {
			t.Errorf("first contended Acquire named %q, want none, then the call's waiter twice", named)
		}
		named, _ = contended("next contended Acquire", false)
		if len(named) != 2 || named[0] == "" || named[1] != named[0] {
			t.Errorf("next contended Acquire named %q, want its waiter twice", named)
		}
		named, leaves := contended("an Acquire giving up", true)
		if len(named) != 1 || named[0] == "" || !slices.Equal(leaves, named) {
			t.Errorf("an Acquire giving up named %q and left %q, want its waiter once, and to leave", named, leaves)
		}
	})
}

// TestHandedTurnStartsOutOfLine: a waiter that a waiter of its own
// process handed the turn to makes its first attempt out of line, although
// the key's notices are kept (the key is contended); refused, it attempts
// in line at once.
func TestHandedTurnStartsOutOfLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		rec, c, other := recordedLock(t)
		holder, err := other.Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acquire := func() <-chan *Lease {
			got := make(chan *Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, nil)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			synctest.Wait()
			return got
		}
		first := acquire()  // refused twice, in line, waiting for a notice
		second := acquire() // waiting for its turn
		rec.take()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first takes the lock and hands the turn over
		named, _ := rec.take()
		if len(named) != 3 || named[0] == "" || named[1] != "" || named[2] == "" || named[2] == named[0] {
			t.Fatalf("after the release named %q, want the first's waiter (granted), then none and the second's waiter (refused)", named)
		}
		l := <-first
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l = <-second
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if named, _ := rec.take(); len(named) != 1 || named[0] == "" {
			t.Errorf("on the first's release the second named %q, want its waiter once (granted)", named)
		}
	})
}
