package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/locker"
)

// TestDoReleasesOnPanic: a panic in Do's function releases the lease (and
// stops its watcher) before it reaches the caller.
func TestDoReleasesOnPanic(t *testing.T) {
	ctx := context.Background()
	b, err := dsync.NewBackend(memory.New(nil), nil)
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

// lostHold has only the methods of a Lease that RunLeased calls, and is
// lost when lose is called.
type lostHold struct {
	mu                 sync.Mutex // protects the fields below
	done               chan struct{}
	err                error
	extended, released bool
}

func (h *lostHold) AutoExtend() { h.mu.Lock(); h.extended = true; h.mu.Unlock() }

func (h *lostHold) Done() <-chan struct{} { return h.done }

func (h *lostHold) Err() error { h.mu.Lock(); defer h.mu.Unlock(); return h.err }

func (h *lostHold) Release(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	return nil
}

func (h *lostHold) lose() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = fmt.Errorf("%w: gone", dsync.ErrLeaseLost)
	close(h.done)
}

// TestRunLeasedOnAnyHold: RunLeased runs fn under any value with
// AutoExtend, Done, Err and Release: it starts auto-extension, cancels fn's
// context with the loss as cause, releases, and reports the loss.
func TestRunLeasedOnAnyHold(t *testing.T) {
	h := &lostHold{done: make(chan struct{})}
	err := dsync.RunLeased(context.Background(), h, func(ctx context.Context) error {
		h.lose()
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, dsync.ErrLeaseLost) {
			t.Errorf("fn's context ended with cause %v, want the loss", cause)
		}
		return nil
	})
	if !errors.Is(err, dsync.ErrLeaseLost) {
		t.Errorf("RunLeased = %v, want the loss", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.extended || !h.released {
		t.Errorf("AutoExtend called: %v, Release called: %v; want both", h.extended, h.released)
	}
}
