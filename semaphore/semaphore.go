// Package semaphore implements dsync.Semaphore once, over any backend's
// driver: at most Size holders of a name's permits at once, across every
// process that uses the name. Each permit is a lease of its own, with the
// same machinery as a lock's (package locker): validity with a clock-drift
// allowance, fencing tokens, bounded extension and auto-extension, loss
// detection, release. A holder that crashes gives its permit back when the
// permit's TTL runs out. A Semaphore is a dsync.Locker: dsync.Do(ctx, sem,
// fn) runs fn under one of its permits.
//
// How each backend keeps the bound (see the README's guarantees table):
// single Redis keeps the holders in a sorted set scored by expiry on the
// server's clock; etcd keeps one key per holder, each on its own lease, and
// the holders are the first Size keys by create revision; Redlock builds
// the semaphore from Size independent slot locks, each one a Redlock lock
// (a majority vote over per-node sets would not be safe above size 1);
// memory counts holders in process.
package semaphore

import (
	"context"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/locker"
)

// Options configure a Semaphore: the same options, with the same defaults
// and checks, as a Locker's (TTL, retry policy, drift, release timeout,
// fencing, auto-extension and its bounds). Value is stored with each
// permit. A nil *Options means defaults.
type Options = locker.Options

// Semaphore hands out permits of one name on one backend: each is a
// dsync.Lease on one slot. It is safe for concurrent use; every permit is
// independent. A Semaphore is a dsync.Locker, so dsync.Do runs a function
// under one of its permits.
type Semaphore struct {
	cfg *lease.Config
}

var (
	_ dsync.Semaphore = (*Semaphore)(nil)
	_ dsync.Locker    = (*Semaphore)(nil) // dsync.Do takes a semaphore
)

// New returns a semaphore of size permits named name on b. It makes no I/O:
// a name that is not a valid key (see locker.New), a size <= 0 or above
// what the backend supports, or bad options are errors here
// (*dsync.InvalidError, or dsync.ErrUnsupported for a backend that offers
// locks only).
//
// Every user of a name must agree on its size. A disagreement shows at the
// first acquisition attempt that meets holders of the other size (the
// earliest moment the backend is asked): that attempt fails with an
// *dsync.InvalidError naming both sizes, and Acquire does not retry it. A
// semaphore of size 1 is the lock of the same name.
func New(b *dsync.Backend, name string, size int, opts *Options) (*Semaphore, error) {
	cfg, err := lease.New(b, lease.Semaphore, name, size, (*lease.Options)(opts))
	if err != nil {
		return nil, err
	}
	return &Semaphore{cfg: cfg}, nil
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.cfg.Key }

// Size implements dsync.Semaphore.
func (s *Semaphore) Size() int { return s.cfg.Limit }

// Acquire implements dsync.Semaphore: it blocks until a permit is free or
// ctx ends, retrying with jittered backoff and waking early when the
// backend reports a release. Waiters of one process are served first come,
// first served. On failure nothing is left held and the error matches
// dsync.ErrNotAcquired, ctx's error when ctx ended, and
// dsync.ErrUnavailable when the last attempt found the backend unable to
// decide.
func (s *Semaphore) Acquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := s.cfg.Acquire(ctx, nil)
	if err != nil {
		return nil, err // not a typed nil
	}
	return ls, nil
}

// TryAcquire implements dsync.Semaphore: one attempt, bounded by ctx and
// the backend's request timeout. When every permit is taken the error matches
// dsync.ErrNotAcquired and not dsync.ErrUnavailable; when the backend could
// not decide, both.
func (s *Semaphore) TryAcquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := s.cfg.TryAcquire(ctx)
	if err != nil {
		return nil, err
	}
	return ls, nil
}
