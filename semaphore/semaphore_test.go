package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/semaphore"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// locksOnly is a driver that offers no semaphores.
type locksOnly struct{ backends.Driver }

func (d locksOnly) Capabilities() backends.Capabilities {
	c := d.Driver.Capabilities()
	c.MaxLimit = 1
	return c
}

func TestNewRejectsBadInput(t *testing.T) {
	b := testutil.Memory(t, nil)
	for _, tc := range []struct {
		name  string
		b     *dsync.Backend
		sem   string
		size  int
		opts  *semaphore.Options
		field string
	}{
		{name: "nil backend", sem: "s", size: 2, field: "backend"},
		{name: "empty name", b: b, size: 2, field: "key"},
		{name: "zero size", b: b, sem: "s", field: "size"},
		{name: "negative size", b: b, sem: "s", size: -3, field: "size"},
		{name: "size above the backend's maximum", b: b, sem: "s", size: 1<<20 + 1, field: "size"},
		{name: "negative ttl", b: b, sem: "s", size: 2, opts: &semaphore.Options{TTL: -time.Second}, field: "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := semaphore.New(tc.b, tc.sem, tc.size, tc.opts)
			var inv *dsync.InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.field {
				t.Fatalf("New: %v, want an InvalidError on %s", err, tc.field)
			}
		})
	}
	_, err := semaphore.New(testutil.NewBackend(t, locksOnly{testutil.MemoryDriver(t, nil)}), "s", 2, nil)
	if !errors.Is(err, dsync.ErrUnsupported) {
		t.Fatalf("New on a lock-only backend: %v, want ErrUnsupported", err)
	}
	if _, err := semaphore.New(testutil.NewBackend(t, locksOnly{testutil.MemoryDriver(t, nil)}), "s", 1, nil); err != nil {
		t.Fatalf("New of size 1 on a lock-only backend: %v", err)
	}
}

func TestFullSemaphoreSaysSo(t *testing.T) {
	ctx := context.Background()
	sem, err := semaphore.New(testutil.Memory(t, nil), "exports", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := testutil.MustAcquire(t, ctx, sem)
	b := testutil.MustAcquire(t, ctx, sem)
	defer a.Release(ctx)
	defer b.Release(ctx)
	_, err = sem.TryAcquire(ctx)
	if !errors.Is(err, dsync.ErrNotAcquired) || err.Error() != `dsync: not acquired: all 2 permits of "exports" are taken` {
		t.Fatalf("TryAcquire on a full semaphore: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = sem.Acquire(wctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dsync.ErrNotAcquired) {
		t.Fatalf("Acquire on a full semaphore: %v", err)
	}
}

func TestDoRejectsNil(t *testing.T) {
	sem, err := semaphore.New(testutil.Memory(t, nil), "s", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dsync.Do(context.Background(), nil, func(context.Context) error { return nil }); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("Do with a nil semaphore: %v", err)
	}
	if err := dsync.Do(context.Background(), sem, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("Do with a nil function: %v", err)
	}
}

// A permit lost while Do's function runs cancels the function's context.
func TestDoCancelsOnLoss(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore(nil)
	d := testutil.MemoryDriver(t, &memory.Options{Store: store})
	sem, err := semaphore.New(testutil.NewBackend(t, d), "s", 2, &semaphore.Options{TTL: 300 * time.Millisecond, MaxExtensions: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = dsync.Do(ctx, sem, func(ctx context.Context) error {
		<-ctx.Done() // after one extension the permit runs out
		return nil
	})
	if !errors.Is(err, dsync.ErrLeaseLost) {
		t.Fatalf("Do: %v, want ErrLeaseLost", err)
	}
}
