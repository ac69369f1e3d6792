package dsync_test

import (
	"context"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/locker"
)

// TestDoReleasesOnPanic: a panic in Do's function releases the lease (and
// stops its watcher) before it reaches the caller.
func TestDoReleasesOnPanic(t *testing.T) {
	ctx := context.Background()
	b, err := memory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := locker.New(b, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("fn's panic did not reach Do's caller")
			}
		}()
		_ = dsync.Do(ctx, l, func(context.Context) error { panic("fn") })
	}()
	ls, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after fn panicked: %v, want the lock released", err)
	}
	_ = ls.Release(ctx)
}
