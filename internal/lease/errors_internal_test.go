package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/retry"
)

// scriptedDriver is a memory driver whose calls can be replaced, and
// counted.
type scriptedDriver struct {
	backends.Driver
	calls   atomic.Int32
	acquire func(ctx context.Context, req backends.Request) (backends.Grant, error)
	release func(ctx context.Context, key, token string) error
}

func (d *scriptedDriver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	d.calls.Add(1)
	if d.acquire != nil {
		return d.acquire(ctx, req)
	}
	return d.Driver.Acquire(ctx, req)
}

func (d *scriptedDriver) Release(ctx context.Context, key, token string) error {
	d.calls.Add(1)
	if d.release != nil {
		return d.release(ctx, key, token)
	}
	return d.Driver.Release(ctx, key, token)
}

func (d *scriptedDriver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	d.calls.Add(1)
	return d.Driver.WatchReleases(ctx, key)
}

// TestDoneContextSendsNothing: an acquisition whose ctx is already done
// returns at once, with no call to the driver (no attempt, no clean-up),
// and an error matching both ErrNotAcquired and ctx's error.
func TestDoneContextSendsNothing(t *testing.T) {
	d := &scriptedDriver{Driver: testutil.MemoryDriver(t, nil)}
	c := testConfig(t, d, "k", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, acquire := range map[string]func(context.Context) (*Lease, error){
		"TryAcquire": c.TryAcquire,
		"Acquire":    func(ctx context.Context) (*Lease, error) { return c.Acquire(ctx, nil) },
	} {
		if _, err := acquire(ctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s on a done context: %v, want ErrNotAcquired and context.Canceled", name, err)
		}
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("%d driver calls on a done context, want none", n)
	}
}

// TestCleanUpBoundedByCallerDeadline: the release after an attempt whose
// outcome is unknown runs on a fresh context when the caller's was
// cancelled, and ends by the caller's deadline when that comes before the
// release timeout.
func TestCleanUpBoundedByCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		var releasedFor time.Duration
		start := time.Now()
		d := &scriptedDriver{
			Driver: testutil.MemoryDriver(t, nil),
			acquire: func(context.Context, backends.Request) (backends.Grant, error) {
				cancel() // the caller gives up while the reply is lost
				return backends.Grant{}, errors.New("reply lost")
			},
			release: func(ctx context.Context, _, _ string) error {
				if ctx.Err() != nil {
					t.Error("clean-up release on a done context")
				}
				<-ctx.Done() // a server that never answers
				releasedFor = time.Since(start)
				return ctx.Err()
			},
		}
		c := testConfig(t, d, "k", &Options{ReleaseTimeout: 10 * time.Second})
		if _, err := c.TryAcquire(ctx); err == nil {
			t.Fatal("TryAcquire succeeded on a lost reply")
		}
		if releasedFor != deadline {
			t.Errorf("clean-up release gave up after %v, want the caller's deadline %v (release timeout 10s)", releasedFor, deadline)
		}
	})
}

// TestReleaseWithLostReplyMatchesSentinel: a Release whose reply never
// comes returns an error matching a dsync sentinel (ErrNotHeld: the lease
// has ended here) and the context's error.
func TestReleaseWithLostReplyMatchesSentinel(t *testing.T) {
	d := &scriptedDriver{Driver: testutil.MemoryDriver(t, nil)}
	c := testConfig(t, d, "k", nil)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.release = func(context.Context, string, string) error { return context.DeadlineExceeded }
	err = l.Release(ctx)
	if !errors.Is(err, dsync.ErrNotHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release with a lost reply: %v, want ErrNotHeld and context.DeadlineExceeded", err)
	}
	if !errors.Is(l.Err(), dsync.ErrReleased) {
		t.Fatalf("Err after Release = %v, want ErrReleased", l.Err())
	}
}

// TestTryAcquireFailureMatchesSentinel: a TryAcquire whose one attempt
// failed with a driver's raw error (a lost reply, an attempt cut short by
// the caller's deadline) matches dsync.ErrNotAcquired, and ctx's error when
// ctx ended, and still carries the driver's error.
func TestTryAcquireFailureMatchesSentinel(t *testing.T) {
	lost := errors.New("reply lost")
	silent := false
	d := &scriptedDriver{
		Driver: testutil.MemoryDriver(t, nil),
		acquire: func(ctx context.Context, _ backends.Request) (backends.Grant, error) {
			if silent {
				// A server that does not answer, and an error worded as
				// a client words it, without ctx's error.
				<-ctx.Done()
				return backends.Grant{}, errors.New("i/o timeout")
			}
			return backends.Grant{}, lost
		},
	}
	c := testConfig(t, d, "k", nil)
	if _, err := c.TryAcquire(context.Background()); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, lost) {
		t.Errorf("TryAcquire with a lost reply: %v, want ErrNotAcquired and the driver's error", err)
	}
	silent = true
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.TryAcquire(ctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire cut short by the caller's deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

// TestTakenOrUnavailable: the SPI's shapes of a failed attempt become
// errors that one errors.Is on dsync.ErrUnavailable tells apart, for
// TryAcquire and for an Acquire that ends on its deadline (which says
// what its last attempt met); contention never matches ErrUnavailable,
// every failure but a final one matches ErrNotAcquired, the driver's
// error stays in the chain, and the message says "not acquired" once.
// The real outages are in the conformance suite (backendtest.Outage).
func TestTakenOrUnavailable(t *testing.T) {
	raw := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"plain contention", backends.ErrNotAcquired, false},
		{"contention with the driver's detail", fmt.Errorf("%w: 2 of 5 nodes granted, 3 needed", backends.ErrNotAcquired), false},
		{"a raw client error", raw, true},
		{"the driver's undecided refusal", fmt.Errorf("%w: %w: 2 of 5 granted, 2 did not answer: %w", backends.ErrNotAcquired, backends.ErrUnavailable, raw), true},
		{"the driver's unavailability", fmt.Errorf("%w: %w", backends.ErrUnavailable, raw), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &scriptedDriver{
				Driver:  testutil.MemoryDriver(t, nil),
				acquire: func(context.Context, backends.Request) (backends.Grant, error) { return backends.Grant{}, tc.err },
			}
			betweens := 0
			policy, err := retry.NewConstant(&retry.ConstantOptions{Delay: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			c := testConfig(t, d, "k", &Options{Retry: policy})
			check := func(call string, err error) {
				t.Helper()
				if !errors.Is(err, dsync.ErrNotAcquired) || errors.Is(err, dsync.ErrUnavailable) != tc.unavailable || !errors.Is(err, tc.err) {
					t.Errorf("%s: %v; want ErrNotAcquired, ErrUnavailable %v, and the driver's error", call, err, tc.unavailable)
				}
				if n := strings.Count(err.Error(), "not acquired"); n != 1 {
					t.Errorf("%s: %q says \"not acquired\" %d times, want once", call, err, n)
				}
			}
			_, err = c.TryAcquire(context.Background())
			check("TryAcquire", err)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err = c.Acquire(ctx, func(context.Context) error { betweens++; return nil })
			check("Acquire", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire ended by its deadline: %v, want DeadlineExceeded too", err)
			}
			if tc.unavailable && betweens != 0 {
				t.Errorf("between ran %d times after attempts the backend could not decide, want 0 (it runs on contention)", betweens)
			}
		})
	}
	// A final error stays final: not ErrNotAcquired, not ErrUnavailable.
	d := &scriptedDriver{
		Driver: testutil.MemoryDriver(t, nil),
		acquire: func(context.Context, backends.Request) (backends.Grant, error) {
			return backends.Grant{}, fmt.Errorf("%w: %w", backends.Invalid("request", "refused"), raw)
		},
	}
	if _, err := testConfig(t, d, "k", nil).TryAcquire(context.Background()); !errors.Is(err, dsync.ErrInvalid) ||
		errors.Is(err, dsync.ErrNotAcquired) || errors.Is(err, dsync.ErrUnavailable) {
		t.Errorf("TryAcquire refused for good: %v, want ErrInvalid alone", err)
	}
}
