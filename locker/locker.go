// Package locker implements dsync.Locker once, over any backend's driver:
// blocking acquisition with jittered retry and release wake-ups, fencing
// tokens, validity with a clock-drift allowance, bounded extension and
// auto-extension, and loss detection.
package locker

import (
	"context"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/retry"
)

// Defaults of Options.
const (
	DefaultTTL            = 10 * time.Second
	DefaultDriftFactor    = 0.01
	DefaultDriftMin       = 2 * time.Millisecond
	DefaultMaxHold        = time.Hour
	DefaultReleaseTimeout = 2 * time.Second
)

// Options configure a Locker. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// TTL is the time a lease lives on the backend unless extended.
	// Default: the backend URL's ttl option, else DefaultTTL (10s).
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
	// AttemptTimeout bounds one acquisition attempt. Default TTL/3.
	AttemptTimeout time.Duration
	// ReleaseTimeout bounds Release (and the clean-up of a failed attempt)
	// when the caller's context has no earlier deadline. Default 2s.
	ReleaseTimeout time.Duration
	// Value is stored with the hold; backends report it as the holder's
	// value (the leader package stores the candidate ID there). At most
	// backends.MaxValueSize bytes.
	Value []byte
	// NoFencing skips drawing fencing tokens (Lease.Token is then 0). On
	// Redis this saves the per-key counter, which otherwise stays in
	// memory for every distinct key ever locked.
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
	key    string
	cfg    *lease.Config
	policy retry.Policy
	auto   bool
}

var _ dsync.Locker = (*Locker)(nil)

// New returns a Locker for key on b. It checks the options against each
// other and against the backend's capabilities, with no I/O: an empty key,
// a TTL <= 0 or below the backend's resolution, or a TTL too small for the
// drift allowance and attempt timeout is an *dsync.InvalidError.
func New(b *dsync.Backend, key string, opts *Options) (*Locker, error) {
	cfg, policy, auto, err := Config(b, key, 1, opts)
	if err != nil {
		return nil, err
	}
	return &Locker{key: key, cfg: cfg, policy: policy, auto: auto}, nil
}

// Config validates opts for a hold of limit holders on key and returns the
// lease configuration, the retry policy and whether leases auto-extend. The
// semaphore and leader packages build on it, so that every primitive checks
// the same options the same way.
func Config(b *dsync.Backend, key string, limit int, opts *Options) (*lease.Config, retry.Policy, bool, error) {
	if b == nil {
		return nil, nil, false, backends.Invalid("backend", "nil")
	}
	if key == "" {
		return nil, nil, false, backends.Invalid("key", "empty")
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	d := b.Defaults()
	caps := b.Driver().Capabilities()
	if limit <= 0 {
		return nil, nil, false, backends.Invalid("size", "%d is not positive", limit)
	}
	if limit > max(caps.MaxLimit, 1) {
		if caps.MaxLimit <= 1 {
			return nil, nil, false, fmt.Errorf("%w: the %s backend offers locks only (size %d asked)", backends.ErrUnsupported, caps.Name, limit)
		}
		return nil, nil, false, backends.Invalid("size", "%d exceeds the %s backend's maximum of %d", limit, caps.Name, caps.MaxLimit)
	}
	if o.TTL == 0 {
		o.TTL = d.TTL
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if err := b.Driver().CheckTTL(o.TTL); err != nil {
		return nil, nil, false, err
	}
	o.DriftFactor = max(orDefault(o.DriftFactor, DefaultDriftFactor), 0)
	o.DriftMin = max(orDefault(o.DriftMin, DefaultDriftMin), 0)
	o.AttemptTimeout = orDefault(o.AttemptTimeout, o.TTL/3)
	o.ReleaseTimeout = orDefault(o.ReleaseTimeout, DefaultReleaseTimeout)
	o.MaxHold = orDefault(o.MaxHold, DefaultMaxHold)
	if len(o.Value) > backends.MaxValueSize {
		return nil, nil, false, backends.Invalid("value", "%d bytes exceeds the maximum of %d", len(o.Value), backends.MaxValueSize)
	}
	if o.MaxExtensions < 0 {
		return nil, nil, false, backends.Invalid("max extensions", "%d is negative", o.MaxExtensions)
	}
	if o.DriftFactor >= 1 {
		return nil, nil, false, backends.Invalid("drift factor", "%v is not below 1", o.DriftFactor)
	}
	cfg := &lease.Config{
		Driver: b.Driver(), Limit: limit, Value: o.Value, Fence: !o.NoFencing, TTL: o.TTL,
		DriftFactor: o.DriftFactor, DriftMin: o.DriftMin,
		AttemptTimeout: o.AttemptTimeout, ReleaseTimeout: o.ReleaseTimeout,
		ExtendInterval: o.ExtendInterval, MaxExtensions: o.MaxExtensions, MaxHold: o.MaxHold,
	}
	validity := o.TTL - cfg.Drift(o.TTL)
	switch {
	case validity <= 0:
		return nil, nil, false, backends.Invalid("ttl", "%v leaves no validity after the clock-drift allowance of %v", o.TTL, cfg.Drift(o.TTL))
	case o.AttemptTimeout >= validity:
		return nil, nil, false, backends.Invalid("ttl", "%v is too small for the attempt timeout %v plus the drift allowance %v", o.TTL, o.AttemptTimeout, cfg.Drift(o.TTL))
	case o.ExtendInterval < 0 || o.ExtendInterval >= validity:
		return nil, nil, false, backends.Invalid("extend interval", "%v must be positive and below the validity %v (ttl minus drift)", o.ExtendInterval, validity)
	case o.MaxHold > 0 && o.MaxHold < o.TTL:
		return nil, nil, false, backends.Invalid("max hold", "%v is below the ttl %v", o.MaxHold, o.TTL)
	}
	if o.MaxHold < 0 {
		cfg.MaxHold = 0
	}
	policy := o.Retry
	if policy == nil {
		var err error
		policy, err = retry.NewExponential(&retry.ExponentialOptions{Min: d.RetryMin, Max: d.RetryMax})
		if err != nil {
			return nil, nil, false, backends.Invalid("retry", "%v", err)
		}
	}
	return cfg, policy, o.AutoExtend, nil
}

func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Key is the locker's key.
func (l *Locker) Key() string { return l.key }

// TTL is the requested lease TTL (a backend may grant a different one; see
// the lease).
func (l *Locker) TTL() time.Duration { return l.cfg.TTL }

// Acquire implements dsync.Locker: it blocks until the lock is obtained or
// ctx ends, retrying with jittered backoff and waking early when the
// backend reports a release. On failure nothing is left held and the error
// matches dsync.ErrNotAcquired, and ctx's error when ctx ended.
func (l *Locker) Acquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := lease.Acquire(ctx, l.cfg, l.key, l.policy)
	return l.started(ls, err)
}

// TryAcquire implements dsync.Locker: one attempt, bounded by the attempt
// timeout. A lock held by another owner gives an error matching
// dsync.ErrNotAcquired.
func (l *Locker) TryAcquire(ctx context.Context) (dsync.Lease, error) {
	ls, err := lease.Attempt(ctx, l.cfg, l.key)
	if err == dsync.ErrNotAcquired { // the bare sentinel: plain contention
		err = fmt.Errorf("%w: %s", err, lease.Taken(l.cfg, l.key))
	}
	return l.started(ls, err)
}

func (l *Locker) started(ls *lease.Lease, err error) (dsync.Lease, error) {
	if err != nil {
		return nil, err
	}
	if l.auto {
		ls.AutoExtend()
	}
	return ls, nil
}

// Holder returns the value stored by the current holder of the lock
// (Options.Value) and its remaining TTL as the backend reports it, or an
// error matching dsync.ErrNotHeld when the lock is free.
func (l *Locker) Holder(ctx context.Context) (backends.HolderInfo, error) {
	return l.cfg.Driver.Holder(ctx, l.key)
}
