package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
)

// acquirer is a Locker or a Semaphore, as dsync lock and dsync sem see them.
type acquirer interface {
	Acquire(ctx context.Context) (dsync.Lease, error)
	TryAcquire(ctx context.Context) (dsync.Lease, error)
}

// acquire makes one attempt (try) or waits, up to timeout when positive,
// until ctx ends. It returns the lease, or nil and the exit status: 3 not
// free (try), 4 timed out, 6 backend unavailable (the attempt, or the last
// one before the timeout), 128+signal interrupted, 2 any other error.
func acquire(ctx context.Context, a acquirer, try bool, timeout time.Duration, what string, r reporter, io stdio) (dsync.Lease, int) {
	var (
		lease dsync.Lease
		err   error
	)
	if try {
		lease, err = a.TryAcquire(ctx)
	} else {
		r.event("waiting for the %s", what)
		actx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, timeout)
		}
		lease, err = a.Acquire(actx)
		cancel()
	}
	if err == nil {
		r.event("acquired %s %q, token %d, valid for %v", what, lease.Key(), lease.Token(), lease.Validity().Round(time.Millisecond))
		return lease, exitOK
	}
	return nil, acquireFailed(ctx, err, r, io)
}

// acquireFailed reports err, the failure of a wait for a hold, and returns
// the exit status. An unavailable backend is reported even with -q: it is
// a backend error, not the lock's state.
func acquireFailed(ctx context.Context, err error, r reporter, io stdio) int {
	switch {
	case ctx.Err() != nil:
		r.notice("%s while waiting", context.Cause(ctx))
		return interrupted(ctx)
	case errors.Is(err, dsync.ErrUnavailable) && !errors.Is(err, dsync.ErrInvalid):
		fmt.Fprintf(io.err, "%s%s\n", r.prefix, oneLine(err))
		return exitUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		r.notice("%s", oneLine(err))
		return exitTimedOut
	case errors.Is(err, dsync.ErrNotAcquired) && !errors.As(err, new(*dsync.InvalidError)):
		r.notice("%s", oneLine(err))
		return exitNotAcquired
	}
	fmt.Fprintf(io.err, "%s%s\n", r.prefix, oneLine(err))
	return exitUsage
}
