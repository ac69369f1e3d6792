package dsync_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// Do over the memory backend, whose server clock the tests set apart from
// the client's. Every lease here has no drift allowance, so that its
// validity is its TTL, and is extended every second.

const (
	lossTTL    = 3 * time.Second
	lossExtend = time.Second
)

// lossLocker returns a locker on key of b with lossTTL and lossExtend,
// and at most maxExtensions extensions (0: the default bound).
func lossLocker(t *testing.T, b *dsync.Backend, key string, maxExtensions int) *locker.Locker {
	t.Helper()
	l, err := locker.New(b, key, &locker.Options{
		TTL: lossTTL, ExtendInterval: lossExtend, MaxExtensions: maxExtensions, DriftFactor: -1, DriftMin: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestDoReturnsFnErrorAndReleases: Do returns fn's error as it is and
// releases the lease: the lock is free when Do returns.
func TestDoReturnsFnErrorAndReleases(t *testing.T) {
	ctx := context.Background()
	b := testutil.Memory(t, nil)
	sentinel := errors.New("work failed")
	if err := dsync.Do(ctx, lossLocker(t, b, "k", 0), func(context.Context) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	ls := testutil.MustAcquire(t, ctx, lossLocker(t, b, "k", 0))
	_ = ls.Release(ctx)
}

// TestDoCancelsOnBoundReached: Do extends the lease while fn runs, and
// when the extension bound lets it run out, fn's context is cancelled the
// moment its validity ends, with ErrLeaseLost as the cause; Do joins fn's
// error with the loss.
func TestDoCancelsOnBoundReached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := lossLocker(t, testutil.Memory(t, nil), "k", 1)
		start := time.Now()
		var cause error
		var cancelled time.Duration
		err := dsync.Do(ctx, l, func(fctx context.Context) error {
			select {
			case <-fctx.Done():
				cause, cancelled = context.Cause(fctx), time.Since(start)
				return fctx.Err()
			case <-time.After(time.Hour):
				return errors.New("fn's context not cancelled when the lease ran out")
			}
		})
		if !errors.Is(err, dsync.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want ErrLeaseLost joined with fn's context.Canceled", err)
		}
		if !errors.Is(cause, dsync.ErrLeaseLost) {
			t.Fatalf("fn's context cause = %v, want ErrLeaseLost", cause)
		}
		// One extension, at lossExtend, then the TTL runs out.
		if want := lossExtend + lossTTL; cancelled != want {
			t.Fatalf("fn's context cancelled after %v, want %v (one extension, then the TTL)", cancelled, want)
		}
	})
}

// TestDoCancelsOnHoldGone: when the hold is gone from the server (expired
// there, as after a pause of the client), the next extension finds it so:
// fn's context is cancelled then with ErrLeaseLost as the cause, and Do
// reports the loss even though fn returned nil.
func TestDoCancelsOnHoldGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		server := memory.NewManualClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
		b := testutil.Memory(t, &memory.Options{Store: memory.NewStore(server)})
		l := lossLocker(t, b, "k", 0)
		start := time.Now()
		var cause error
		var cancelled time.Duration
		err := dsync.Do(ctx, l, func(fctx context.Context) error {
			server.Advance(lossTTL) // the hold expires on the server, not here
			select {
			case <-fctx.Done():
				cause, cancelled = context.Cause(fctx), time.Since(start)
			case <-time.After(time.Hour):
				t.Fatal("fn's context not cancelled when the hold was gone")
			}
			return nil
		})
		if !errors.Is(err, dsync.ErrLeaseLost) {
			t.Fatalf("Do = %v, want ErrLeaseLost although fn returned nil", err)
		}
		if !errors.Is(cause, dsync.ErrLeaseLost) || !errors.Is(cause, dsync.ErrNotHeld) {
			t.Fatalf("fn's context cause = %v, want ErrLeaseLost wrapping ErrNotHeld", cause)
		}
		if cancelled != lossExtend {
			t.Fatalf("fn's context cancelled after %v, want at the first extension (%v)", cancelled, lossExtend)
		}
	})
}
