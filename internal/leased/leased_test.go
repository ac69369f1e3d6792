package leased_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dsync-dev/dsync/internal/leased"
)

// lostHold has only the methods of a Lease that Run calls, and is
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
	h.err = fmt.Errorf("%w: gone", leased.ErrLeaseLost)
	close(h.done)
}

// TestRunOnAnyHold: Run runs fn under any value with
// AutoExtend, Done, Err and Release: it starts auto-extension, cancels fn's
// context with the loss as cause, releases, and reports the loss.
func TestRunOnAnyHold(t *testing.T) {
	h := &lostHold{done: make(chan struct{})}
	err := leased.Run(context.Background(), h, func(ctx context.Context) error {
		h.lose()
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, leased.ErrLeaseLost) {
			t.Errorf("fn's context ended with cause %v, want the loss", cause)
		}
		return nil
	})
	if !errors.Is(err, leased.ErrLeaseLost) {
		t.Errorf("Run = %v, want the loss", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.extended || !h.released {
		t.Errorf("AutoExtend called: %v, Release called: %v; want both", h.extended, h.released)
	}
}
