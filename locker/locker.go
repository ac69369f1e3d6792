// Package locker implements dsync.Locker over any backend: a Locker hands
// out leases on one key.
//
// Acquire blocks, retrying with jittered backoff and waking early on the
// backend's release notices; the waiters of one process line up first come
// first served. TryAcquire makes one attempt. Either returns an error
// matching dsync.ErrNotAcquired when it fails, and leaves nothing held.
// A lease carries a fencing token (unless Options.NoFencing), a validity
// with a clock-drift allowance, extension within a bound (MaxExtensions,
// MaxHold) and loss detection; see dsync.Lease. A lease never released is
// left to expire on the backend after its TTL.
//
// New checks the options and makes no I/O; the policy itself is written
// once, in internal/lease, for locks, semaphores and elections alike.
package locker

import (
	"context"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/retry"
)

// Defaults of Options.
const (
	DefaultTTL            = lease.DefaultTTL            // 10s
	DefaultDriftFactor    = lease.DefaultDriftFactor    // 0.01
	DefaultDriftMin       = lease.DefaultDriftMin       // 2ms
	DefaultMaxHold        = lease.DefaultMaxHold        // 1h
	DefaultReleaseTimeout = lease.DefaultReleaseTimeout // 2s
)

// Options configure a Locker. A nil *Options means defaults; a zero field
// means that field's default. The semaphore package takes the same
// options. (Its shape is internal/lease's Options, which resolves it.)
type Options struct {
	// TTL is the time a lease lives on the backend unless extended.
	// Zero means the default: the backend URL's ttl option, else
	// DefaultTTL (10s); a negative TTL is invalid.
	TTL time.Duration
	// Retry spaces out the attempts of Acquire. Default: jittered
	// exponential from the URL's retry_min/retry_max, else 10ms to 200ms
	// (see package retry).
	Retry retry.Policy
	// DriftFactor and DriftMin make the allowance for clock drift
	// subtracted from every validity: TTL*DriftFactor + DriftMin. Defaults
	// 0.01 and 2ms. Use a negative value for zero.
	DriftFactor float64
	DriftMin    time.Duration
	// ReleaseTimeout bounds a release made after the caller's context
	// has ended: the clean-up of an attempt whose outcome is unknown, and
	// a Release (or Do's) on a done context, which still runs, on a fresh
	// context. Default 2s. Every other call, an attempt included, is
	// bounded by its context and by the backend's own request timeout
	// (Redis: the client's read and write timeouts; Redlock: the per-node
	// timeout; etcd: the request timeout).
	ReleaseTimeout time.Duration
	// Value is stored with the hold; backends report it as the holder's
	// value (the leader package stores the candidate ID there). At most
	// backends.MaxValueSize bytes.
	Value []byte
	// NoFencing skips drawing fencing tokens (Lease.Token is then 0). On
	// Redis and Redlock an unfenced acquisition is a plain SET NX PX, a
	// little cheaper than the script that also draws the token; the
	// counters themselves are bounded either way (one per Redis Cluster
	// hash slot, docs/redis.md).
	NoFencing bool
	// AutoExtend starts auto-extension on every lease as it is acquired.
	// Without it, call Lease.AutoExtend or use dsync.Do.
	AutoExtend bool
	// ExtendInterval is the auto-extension period. Default TTL/3.
	ExtendInterval time.Duration
	// MaxExtensions bounds the number of extensions of a lease, manual and
	// automatic. Default 0: no bound on the count.
	MaxExtensions int
	// MaxHold bounds the total time a lease may be held through
	// extensions, counted from its acquisition. Default DefaultMaxHold
	// (1h); negative means no bound. Together with MaxExtensions this is
	// the liveness bound the Redlock specification asks for: a holder that
	// never finishes cannot keep the lock forever.
	MaxHold time.Duration
}

// Locker hands out leases on one key of one backend. It is safe for
// concurrent use; every Acquire returns an independent lease.
type Locker struct {
	cfg *lease.Config
}

var _ dsync.Locker = (*Locker)(nil)

// New returns a Locker for key on b. It checks the key and the options
// against each other and against the backend's capabilities, with no I/O.
// A key is any valid UTF-8 text of 1 to backends.MaxKeySize bytes without
// a NUL byte, on every backend. A nil backend, a bad key, a value above
// backends.MaxValueSize, a negative TTL or one the backend refuses (see
// its CheckTTL: below its resolution, above its maximum; zero means the
// default), or a TTL that the drift allowance leaves no validity is an
// *dsync.InvalidError naming the problem.
func New(b *dsync.Backend, key string, opts *Options) (*Locker, error) {
	cfg, err := lease.New(b, lease.Lock, key, 1, (*lease.Options)(opts))
	if err != nil {
		return nil, err
	}
	return &Locker{cfg: cfg}, nil
}

// Key is the locker's key.
func (l *Locker) Key() string { return l.cfg.Key }

// TTL is the requested lease TTL (a backend may grant a different one; see
// the lease).
func (l *Locker) TTL() time.Duration { return l.cfg.TTL }

// Acquire implements dsync.Locker: it blocks until the lock is obtained or
// ctx ends, retrying with jittered backoff and waking early when the
// backend reports a release. On failure nothing is left held and the error
// matches dsync.ErrNotAcquired, ctx's error when ctx ended, and
// dsync.ErrUnavailable when the last attempt found the backend unable to
// decide.
func (l *Locker) Acquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := l.cfg.Acquire(ctx, nil)
	if err != nil {
		return nil, err // not a typed nil
	}
	return ls, nil
}

// TryAcquire implements dsync.Locker: one attempt, bounded by ctx and the
// backend's request timeout. A lock held by another owner gives an error
// matching dsync.ErrNotAcquired and not dsync.ErrUnavailable; a backend
// that could not decide, one matching both.
func (l *Locker) TryAcquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := l.cfg.TryAcquire(ctx)
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// Holder returns the value stored by the current holder of the lock
// (Options.Value), its remaining TTL as the backend reports it and its
// fencing token (the holder's Lease.Token; see backends.HolderInfo for
// when a backend reports none), or an error matching dsync.ErrNotHeld when
// the lock is free, or dsync.ErrUnavailable when the read failed.
func (l *Locker) Holder(ctx context.Context) (backends.HolderInfo, error) {
	info, err := l.cfg.Driver.Holder(ctx, l.cfg.Key)
	return info, lease.Unavailable(l.cfg.Key, err)
}
