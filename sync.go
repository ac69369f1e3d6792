// Package dsync defines the contract of the dsync toolkit: distributed locks,
// counting semaphores and leader election over pluggable backends.
//
// Applications program against the interfaces in this package (Locker,
// Lease, Semaphore, LeaderElection, Leadership) and pick a backend by URL
// with Open:
//
//	import (
//		"github.com/dsync-dev/dsync"
//		"github.com/dsync-dev/dsync/locker"
//		_ "github.com/dsync-dev/dsync/backends/redis" // registers redis:// and rediss://
//	)
//
//	b, err := dsync.Open(ctx, os.Getenv("DSYNC_URL"))
//	...
//	l, err := locker.New(b, "nightly-report", nil)
//	...
//	err = dsync.Do(ctx, l, func(ctx context.Context) error {
//		return run(ctx) // ctx is cancelled if the lock is lost
//	})
//
// Acquire, Campaign and Do block, retrying until they succeed or their
// context ends; Observe streams from a goroutine until its context ends;
// every other call makes one attempt bounded by its context. A
// failed acquisition leaves nothing held; a lease never released is left
// to expire on the backend after its TTL. Errors match the sentinels of
// errors.go. The portable implementations live in the locker, semaphore and
// leader packages; backends live under backends/ and in redlock/.
package dsync

import (
	"context"
	"time"

	"github.com/dsync-dev/dsync/internal/leased"
)

// Lease is a hold on a lock or on one slot of a semaphore, valid for a
// limited time unless extended. All methods are safe for concurrent use.
//
// A lease ends exactly once: by Release (Err returns ErrReleased) or by loss
// (Err returns an error matching ErrLeaseLost): a refresh found the hold gone,
// its local validity ran out, or auto-extension stopped at its bound. Done is
// closed when it ends. Leases are never re-entrant: acquiring the same key
// again while holding it blocks like any other contender.
type Lease interface {
	// Key is the name the lease was acquired on.
	Key() string
	// Token is the fencing token: strictly greater than the token of every
	// earlier lease on the same key, as far as the backend can promise (see
	// the README's guarantees table). Pass it to the resource you protect so
	// that it can reject writes from a stale holder. Zero if the backend or
	// the locker's options provide no fencing.
	Token() uint64
	// Expires is the local (monotonic clock) time at which the lease stops
	// being safe to rely on: the start of the attempt that obtained or last
	// extended it, plus the TTL the server applied, minus the allowance for
	// clock drift.
	Expires() time.Time
	// Validity is the time left until Expires, or zero once it has passed
	// or the lease has ended.
	Validity() time.Duration
	// Done is closed when the lease ends (released or lost).
	Done() <-chan struct{}
	// Err returns nil while the lease is held, ErrReleased after Release,
	// and an error matching ErrLeaseLost after loss.
	Err() error
	// Extend resets the lease's time to live on the backend, in one attempt
	// bounded by ctx. It returns ErrExtendLimit once the lease's extension
	// bound is reached, an error matching ErrLeaseLost if the hold turned
	// out to be gone (the lease is then lost), ErrNotHeld after Release, or
	// the backend's error if the attempt failed (the lease stays valid until
	// Expires).
	Extend(ctx context.Context) error
	// AutoExtend starts extending the lease in the background, about every
	// third of its TTL, within the extension bound of the options it was
	// acquired with, until it ends. If an extension finds the hold gone, or
	// the bound stops extension, the lease is lost when its validity runs
	// out and Done is closed. Calling it more than once has no further
	// effect. It never blocks.
	AutoExtend()
	// Release gives the hold up. If ctx is already done, Release still
	// tries once on a fresh context with a short timeout, so that a
	// cancelled caller does not leave the hold to expire. It returns
	// ErrNotHeld if the hold had already expired or been released, or if
	// the release's outcome is unknown (no reply: the error also matches
	// the cause, a context's error say); the lease has ended either way.
	Release(ctx context.Context) error
}

// Locker hands out leases on one key. Implementations are safe for
// concurrent use; every lease is independent.
type Locker interface {
	// Acquire blocks until it obtains the lock, retrying with jittered
	// backoff and waking early when the backend reports a release. If ctx
	// ends or the retry policy gives up first, it returns an error matching
	// ErrNotAcquired (and ctx's error when that was the cause; and
	// ErrUnavailable when the last attempt found the backend unable to
	// decide) and leaves nothing held. Acquire and TryAcquire called with a
	// done ctx return at once, with no I/O.
	Acquire(ctx context.Context) (Lease, error)
	// TryAcquire makes one attempt. It returns an error matching
	// ErrNotAcquired, and not ErrUnavailable, if the lock is held by
	// another owner; one matching both if the backend could not decide.
	TryAcquire(ctx context.Context) (Lease, error)
}

// Semaphore admits at most Size() holders at once. Each holder has a
// Lease on one of its slots (a permit), which expires, is extended and is
// released on its own. A Semaphore is a Locker: Do takes one.
type Semaphore interface {
	// Acquire blocks until a slot is free, like Locker.Acquire.
	Acquire(ctx context.Context) (Lease, error)
	// TryAcquire makes one attempt, like Locker.TryAcquire.
	TryAcquire(ctx context.Context) (Lease, error)
	// Size is the number of slots.
	Size() int
}

// Leadership is one term of leadership, kept alive automatically while held.
type Leadership interface {
	// Term is a fencing token that grows with every new term.
	Term() uint64
	// Done is closed when leadership ends (resigned or lost).
	Done() <-chan struct{}
	// Err returns nil while leading, ErrReleased after Resign, and an error
	// matching ErrLeaseLost after loss.
	Err() error
	// Resign gives leadership up at once, so that another candidate can
	// take over without waiting for the term to expire.
	Resign(ctx context.Context) error
}

// LeaderInfo is the state of an election as an observer's read found it.
// The zero value means no leader.
type LeaderInfo struct {
	// ID is the leader's candidate ID, or empty when there is no leader.
	ID string
	// Term is the fencing token of the leader's term, its
	// Leadership.Term(); zero when there is no leader or the backend has
	// no fencing.
	Term uint64
}

// LeaderElection elects one leader among candidates of the same name.
type LeaderElection interface {
	// Campaign blocks until this candidate leads, or ctx ends (an error
	// matching ErrNotAcquired and ctx's error, and ErrUnavailable when the
	// last attempt found the backend unable to decide).
	Campaign(ctx context.Context) (Leadership, error)
	// Leader returns the current leader's candidate ID and term, or an
	// error matching ErrNoLeader.
	Leader(ctx context.Context) (LeaderInfo, error)
	// Observe streams the leader as successive reads find it, each state
	// that differs from the last one sent, including the lack of a leader,
	// until ctx ends; then the channel is closed. It reads at intervals
	// and on release notices: a term shorter than the interval may go
	// unseen.
	Observe(ctx context.Context) <-chan LeaderInfo
}

// Do acquires l (blocking), runs fn while auto-extending the lease, and
// releases the lease when fn returns, or panics (the panic then goes on).
// l may be a semaphore: fn then runs under one of its permits.
//
// fn's context is cancelled, with the lease's error as its cause, the moment
// the lease is lost; fn should stop touching the protected resource then. If
// the lease was lost while fn ran, Do returns an error matching ErrLeaseLost
// even when fn returned nil, and the loss is recorded as an event on the
// span in ctx. Otherwise it returns fn's error joined with any release
// error. If the lock cannot be acquired, fn is not called and the error
// matches ErrNotAcquired.
func Do(ctx context.Context, l Locker, fn func(ctx context.Context) error) error {
	if l == nil {
		return &InvalidError{Field: "locker", Reason: "nil"}
	}
	if fn == nil {
		return &InvalidError{Field: "fn", Reason: "nil"}
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	return leased.Run(ctx, lease, fn)
}
