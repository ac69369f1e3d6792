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
	"github.com/dsync-dev/dsync/retry"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func testConfig(d backends.Driver) *Config {
	return &Config{Driver: d, Limit: 1, TTL: time.Second, AttemptTimeout: time.Second, ReleaseTimeout: time.Second}
}

// TestLateTimerStillReportsLoss: a process paused past its validity (its
// timer not fired yet when it resumes) learns of the loss from Err,
// Validity, Extend and Release at once.
func TestLateTimerStillReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		l, err := Attempt(ctx, testConfig(memory.New(nil)), "k")
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
		cfg := testConfig(memory.New(nil))
		early, err := Attempt(ctx, cfg, "early")
		if err != nil {
			t.Fatal(err)
		}
		late, err := Attempt(ctx, cfg, "late")
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
		holder, err := Attempt(ctx, testConfig(d), "k")
		if err != nil {
			t.Fatal(err)
		}
		n := &releasingNotifier{Driver: d, release: func() { _ = holder.Release(ctx) }}
		slow, err := retry.NewConstant(&retry.ConstantOptions{Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := Acquire(ctx, testConfig(n), "k", slow)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		if waited := time.Since(start); waited > 0 {
			t.Errorf("Acquire waited %v after a release it could see at once", waited)
		}
	})
}

// uncomparable is a driver that cannot be a map key.
type uncomparable struct {
	*memory.Driver
	_ []int
}

func TestClockPerDriver(t *testing.T) {
	a, b := memory.New(nil), memory.New(nil)
	if first, again := clockFor(a), clockFor(a); first != again {
		t.Fatal("two calls on one driver got different clocks")
	}
	if clockFor(a) == clockFor(b) {
		t.Fatal("two drivers share a clock")
	}
	u := uncomparable{Driver: a}
	if first, again := clockFor(u), clockFor(u); first == nil || first == again {
		t.Fatal("a driver that cannot be a map key must get a clock of its own per call")
	}
	for range 2 * maxClocks {
		clockFor(memory.New(nil))
	}
	if n := numClocks.Load(); n > maxClocks {
		t.Fatalf("%d clocks cached, bound %d", n, maxClocks)
	}
}
