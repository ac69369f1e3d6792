package leader_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/leader"
)

// hooks records OnStarted and OnStopped calls.
type hooks struct {
	mu     sync.Mutex // protects events and errs
	events []string
	errs   []error
}

func (h *hooks) options() *leader.RunOptions {
	return &leader.RunOptions{
		OnStarted: func(term uint64) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, fmt.Sprintf("started %d", term))
		},
		OnStopped: func(term uint64, err error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, fmt.Sprintf("stopped %d", term))
			h.errs = append(h.errs, err)
		},
	}
}

// check verifies that the hooks came in pairs of the same term, terms
// growing, and returns the number of terms.
func (h *hooks) check(t *testing.T) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events)%2 != 0 {
		t.Fatalf("hooks not in pairs: %v", h.events)
	}
	var last uint64
	for i := 0; i < len(h.events); i += 2 {
		var a, b uint64
		if _, err := fmt.Sscanf(h.events[i], "started %d", &a); err != nil {
			t.Fatalf("event %d is %q, want a start: %v", i, h.events[i], h.events)
		}
		if _, err := fmt.Sscanf(h.events[i+1], "stopped %d", &b); err != nil || a != b {
			t.Fatalf("event %d is %q, want the stop of term %d: %v", i+1, h.events[i+1], a, h.events)
		}
		if a <= last {
			t.Fatalf("term %d after term %d: %v", a, last, h.events)
		}
		last = a
	}
	return len(h.events) / 2
}

// recorder wraps an election and hands out the leaderships it wins.
type recorder struct {
	*leader.Election
	won chan *leader.Leadership
}

func (r *recorder) Campaign(ctx context.Context) (dsync.Leadership, error) {
	l, err := r.Election.Campaign(ctx)
	if err == nil {
		r.won <- l.(*leader.Leadership)
	}
	return l, err
}

// TestRunRecampaignsAfterLoss: fn's context ends on loss, with the loss as
// its cause; the hooks pair up; Run campaigns again and returns ctx's error
// when ctx ends.
func TestRunRecampaignsAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		e := &recorder{newElection(t, backendOn(t, store), "e", "a", &leader.Options{TTL: 3 * time.Second}), make(chan *leader.Leadership, 2)}
		thief := lease.Driver(backendOn(t, store))
		var h hooks
		causes := make(chan error, 2)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			done <- leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}, h.options())
		}()
		l1 := <-e.won
		if err := thief.Release(context.Background(), "e", holdToken(t, l1)); err != nil {
			t.Fatal(err)
		}
		if cause := <-causes; !errors.Is(cause, dsync.ErrLeaseLost) {
			t.Fatalf("fn's cause = %v, want ErrLeaseLost", cause)
		}
		l2 := <-e.won // campaigned again at once
		if l2.Term() <= l1.Term() {
			t.Fatalf("term %d after term %d", l2.Term(), l1.Term())
		}
		cancel()
		if cause := <-causes; !errors.Is(cause, context.Canceled) {
			t.Fatalf("fn's cause = %v, want Canceled", cause)
		}
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want Canceled", err)
		}
		if n := h.check(t); n != 2 {
			t.Fatalf("%d terms, want 2", n)
		}
		if !errors.Is(h.errs[0], dsync.ErrLeaseLost) {
			t.Errorf("OnStopped of the lost term: %v, want ErrLeaseLost", h.errs[0])
		}
		if err := l2.Err(); !errors.Is(err, dsync.ErrReleased) {
			t.Errorf("last term's Err = %v, want ErrReleased (Run resigns)", err)
		}
		if _, err := e.Leader(context.Background()); !errors.Is(err, dsync.ErrNoLeader) {
			t.Errorf("Leader after Run returned: %v, want ErrNoLeader", err)
		}
	})
}

// TestRunFnErrors: by default a failing fn is retried after the
// recampaign delay; with StopOnError, Run returns fn's error.
func TestRunFnErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		opts := &leader.Options{TTL: 4 * time.Second} // RetryPeriod 1s
		e := newElection(t, backendOn(t, store), "e", "a", opts)
		boom := errors.New("boom")
		var h hooks
		var calls []time.Time
		ctx, cancel := context.WithCancel(context.Background())
		err := leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
			calls = append(calls, time.Now())
			if len(calls) == 3 {
				cancel()
			}
			return boom
		}, h.options())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want Canceled", err)
		}
		if len(calls) != 3 || calls[1].Sub(calls[0]) != time.Second || calls[2].Sub(calls[1]) != time.Second {
			t.Fatalf("fn called at %v, want 3 calls 1s apart (the retry period)", calls)
		}
		if h.check(t) != 3 || !errors.Is(h.errs[0], boom) {
			t.Fatalf("hooks %v %v", h.events, h.errs)
		}

		var h2 hooks
		o := h2.options()
		o.StopOnError = true
		err = leader.Run(context.Background(), e, func(ctx context.Context, term uint64) error { return boom }, o)
		if !errors.Is(err, boom) {
			t.Fatalf("Run with StopOnError = %v, want fn's error", err)
		}
		if h2.check(t) != 1 {
			t.Fatalf("hooks %v", h2.events)
		}
	})
}

// TestRunHandsOverOnReturn: when the leader's fn returns, the follower,
// woken by the resignation, leads before the first candidate campaigns
// again.
func TestRunHandsOverOnReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		opts := &leader.Options{TTL: 4 * time.Second, RetryPeriod: 3 * time.Second}
		var mu sync.Mutex
		var order []string
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b"} {
			e := newElection(t, backendOn(t, store), "e", id, opts)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
					mu.Lock()
					order = append(order, id)
					n := len(order)
					mu.Unlock()
					if n == 4 {
						cancel()
					}
					time.Sleep(100 * time.Millisecond)
					return nil
				}, nil)
			}()
		}
		wg.Wait()
		for i := 1; i < len(order); i++ {
			if order[i] == order[i-1] {
				t.Fatalf("leaders in order %v: a candidate led twice in a row while the other waited", order)
			}
		}
	})
}

func TestRunNoCampaignNoHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		la := campaign(t, newElection(t, backendOn(t, store), "e", "a", nil))
		defer la.Resign(context.Background())
		var h hooks
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := leader.Run(ctx, newElection(t, backendOn(t, store), "e", "b", nil), func(context.Context, uint64) error {
			t.Error("fn called while another candidate leads")
			return nil
		}, h.options())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v, want DeadlineExceeded", err)
		}
		if h.check(t) != 0 {
			t.Fatalf("hooks called without a term: %v", h.events)
		}
	})
}

func TestRunStopsOnFinalErrors(t *testing.T) {
	b := backendOn(t, newStore())
	e := newElection(t, b, "e", "a", nil)
	fn := func(context.Context, uint64) error { return nil }
	if err := leader.Run(context.Background(), nil, fn, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("Run(nil election) = %v, want ErrInvalid", err)
	}
	if err := leader.Run(context.Background(), e, nil, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("Run(nil fn) = %v, want ErrInvalid", err)
	}
	_ = b.Close()
	if err := leader.Run(context.Background(), e, fn, nil); !errors.Is(err, dsync.ErrClosed) {
		t.Errorf("Run on a closed backend = %v, want ErrClosed", err)
	}
}

func TestRunResignsOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newElection(t, backendOn(t, newStore()), "e", "a", nil)
		var h hooks
		func() {
			defer func() {
				if recover() == nil {
					t.Error("fn's panic did not reach Run's caller")
				}
			}()
			_ = leader.Run(context.Background(), e, func(context.Context, uint64) error { panic("fn") }, h.options())
		}()
		if h.check(t) != 1 || h.errs[0] == nil {
			t.Fatalf("hooks after a panic: %v %v", h.events, h.errs)
		}
		if _, err := e.Leader(context.Background()); !errors.Is(err, dsync.ErrNoLeader) {
			t.Fatalf("Leader after fn panicked: %v, want ErrNoLeader (resigned)", err)
		}
	})
}
