package locker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestValidityIsStartPlusTTLMinusDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := locker.New(testutil.Memory(t, nil), "k", &locker.Options{TTL: 10 * time.Second})
		start := time.Now()
		ls := testutil.MustAcquire(t, context.Background(), l)
		drift := 10*time.Second/100 + 2*time.Millisecond
		if got, want := ls.Expires(), start.Add(10*time.Second-drift); !got.Equal(want) {
			t.Fatalf("Expires = start%+v, want start%+v", got.Sub(start), want.Sub(start))
		}
		<-ls.Done()
		if lost := time.Since(start); lost != 10*time.Second-drift {
			t.Fatalf("lease lost after %v, want exactly TTL - drift = %v", lost, 10*time.Second-drift)
		}
		if !errors.Is(ls.Err(), dsync.ErrLeaseLost) {
			t.Fatalf("Err = %v", ls.Err())
		}
	})
}

func TestAutoExtendCadenceAndMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		l, _ := locker.New(testutil.Memory(t, nil), "k", &locker.Options{TTL: ttl, AutoExtend: true, MaxHold: 10 * time.Second})
		start := time.Now()
		ls := testutil.MustAcquire(t, context.Background(), l)
		// Extensions every TTL/3 = 1s; the one at 7s is the last that stays
		// within MaxHold (7s + 3s = 10s); the lease then ends at 7s + TTL - drift.
		<-ls.Done()
		drift := ttl/100 + 2*time.Millisecond
		if lost, want := time.Since(start), 7*time.Second+ttl-drift; lost != want {
			t.Fatalf("lease lost after %v, want %v", lost, want)
		}
		if err := ls.Err(); !errors.Is(err, dsync.ErrLeaseLost) || !strings.Contains(err.Error(), "maximum hold time") {
			t.Fatalf("Err = %v, want ErrLeaseLost naming the maximum hold time", err)
		}
	})
}

func TestAutoExtendMaxExtensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		l, _ := locker.New(testutil.Memory(t, nil), "k", &locker.Options{TTL: ttl, AutoExtend: true, MaxExtensions: 2})
		start := time.Now()
		ls := testutil.MustAcquire(t, context.Background(), l)
		<-ls.Done()
		drift := ttl/100 + 2*time.Millisecond
		if lost, want := time.Since(start), 2*time.Second+ttl-drift; lost != want {
			t.Fatalf("lease lost after %v, want %v (two extensions, one per second)", lost, want)
		}
		if err := ls.Err(); !strings.Contains(err.Error(), "2 extensions") {
			t.Fatalf("Err = %v, want it to name the count bound", err)
		}
	})
}

func TestAutoExtendUnboundedWithNegativeMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := locker.New(testutil.Memory(t, nil), "k", &locker.Options{TTL: 30 * time.Second, AutoExtend: true, MaxHold: -1})
		ls := testutil.MustAcquire(t, context.Background(), l)
		time.Sleep(3 * time.Hour) // fake time: 3 hours of extensions
		if err := ls.Err(); err != nil {
			t.Fatalf("unbounded lease ended: %v", err)
		}
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLossIsDetectedAtRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore(nil)
		b := testutil.Memory(t, &memory.Options{Store: store})
		const ttl = 3 * time.Second
		l, _ := locker.New(b, "k", &locker.Options{TTL: ttl, AutoExtend: true})
		start := time.Now()
		ls := testutil.MustAcquire(t, context.Background(), l)
		// Someone deletes the hold behind our back: an operator, a server
		// that lost its data. The next refresh (at TTL/3) must notice.
		time.Sleep(500 * time.Millisecond)
		other := testutil.MemoryDriver(t, &memory.Options{Store: store})
		defer other.Close()
		info, err := other.Holder(context.Background(), "k")
		if err != nil || info.TTL <= 0 {
			t.Fatalf("Holder: %v", err)
		}
		stealToken(t, ls, other)
		<-ls.Done()
		if lost := time.Since(start); lost != time.Second {
			t.Fatalf("loss detected after %v, want at the first refresh (1s)", lost)
		}
		if err := ls.Err(); !errors.Is(err, dsync.ErrLeaseLost) || !errors.Is(err, dsync.ErrNotHeld) {
			t.Fatalf("Err = %v, want ErrLeaseLost wrapping ErrNotHeld", err)
		}
	})
}

// stealToken releases ls's hold through another client, as if it expired.
func stealToken(t *testing.T, ls dsync.Lease, d backends.Driver) {
	t.Helper()
	tok, _ := lease.HoldToken(ls)
	if err := d.Release(context.Background(), ls.Key(), tok); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseOnCancelledContextStillReleases(t *testing.T) {
	b := testutil.Memory(t, nil)
	l, _ := locker.New(b, "k", nil)
	ls := testutil.MustAcquire(t, context.Background(), l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release on a cancelled context: %v", err)
	}
	if _, err := lease.Driver(b).Holder(context.Background(), "k"); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("hold still there after Release on a cancelled context: %v", err)
	}
}

func TestURLDefaultsApply(t *testing.T) {
	b, err := dsync.Open(context.Background(), "memory://locker-defaults?ttl=42s")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, _ := locker.New(b, "k", nil)
	if l.TTL() != 42*time.Second {
		t.Fatalf("TTL = %v, want the URL's 42s", l.TTL())
	}
	l, _ = locker.New(b, "k", &locker.Options{TTL: time.Second})
	if l.TTL() != time.Second {
		t.Fatalf("TTL = %v, want the option's 1s over the URL's", l.TTL())
	}
}

// A waiter whose context ends while it queues behind another waiter of the
// same process leaves the line at once, with the contract's error, and the
// line keeps moving for those behind it.
func TestCancelledWaiterLeavesTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, _ := locker.New(testutil.Memory(t, nil), "k", &locker.Options{TTL: 10 * time.Second})
		holder := testutil.MustAcquire(t, ctx, l)
		got := make(chan dsync.Lease, 2)
		acquire := func() {
			ls, err := l.Acquire(ctx)
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			got <- ls
		}
		go acquire() // first in line: polls the backend
		synctest.Wait()

		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := l.Acquire(short); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("queued Acquire past its deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Fatalf("queued Acquire returned after %v, want at its 100ms deadline", waited)
		}

		go acquire() // behind the one that gave up
		synctest.Wait()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first := <-got
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second := <-got // the line did not stall on the waiter that left
		if err := second.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestZeroTTLMeansDefault: a zero TTL takes the default, a negative one is
// refused before any I/O.
func TestZeroTTLMeansDefault(t *testing.T) {
	b, err := memory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := locker.New(b, "k", &locker.Options{TTL: 0})
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != locker.DefaultTTL {
		t.Errorf("TTL 0 gave %v, want the default %v", l.TTL(), locker.DefaultTTL)
	}
	if _, err := locker.New(b, "k", &locker.Options{TTL: -time.Second}); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("TTL -1s: %v, want ErrInvalid", err)
	}
}

// TestKeyOverLimit: a key over backends.MaxKeySize is refused by New,
// before any I/O; one at the limit is accepted.
func TestKeyOverLimit(t *testing.T) {
	b, err := memory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := locker.New(b, strings.Repeat("k", backends.MaxKeySize), nil); err != nil {
		t.Errorf("a key at the limit: %v", err)
	}
	if _, err := locker.New(b, strings.Repeat("k", backends.MaxKeySize+1), nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("a key one byte over the limit: %v, want ErrInvalid", err)
	}
}
