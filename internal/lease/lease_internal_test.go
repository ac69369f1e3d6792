package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
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
	c, err := New(b, key, 1, opts)
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
		l, err := testConfig(t, memory.New(nil), "k", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Done() // arms the timer
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

// TestDoneWithoutTimerUntilAsked: Done, asked for before the validity runs
// out, is closed when it does; asked for after, it is closed already. A
// lease never asked costs no timer.
func TestDoneWithoutTimerUntilAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		d := memory.New(nil)
		early, err := testConfig(t, d, "early", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		late, err := testConfig(t, d, "late", nil).Attempt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if late.timer != nil {
			t.Fatal("a timer was armed before Done was asked for")
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
	*memory.Driver
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
		d := memory.New(nil)
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
