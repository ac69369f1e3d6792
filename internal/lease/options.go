package lease

import (
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
	"github.com/dsync-dev/dsync/retry"
)

// Defaults of Options, exported by the locker package.
const (
	DefaultTTL            = 10 * time.Second
	DefaultDriftFactor    = 0.01
	DefaultDriftMin       = 2 * time.Millisecond
	DefaultMaxHold        = time.Hour
	DefaultReleaseTimeout = 2 * time.Second
)

// Options has the shape of locker.Options, which documents each field and
// its default; the public packages convert with lease.Options(*o).
type Options struct {
	TTL            time.Duration
	Retry          retry.Policy
	DriftFactor    float64
	DriftMin       time.Duration
	ReleaseTimeout time.Duration
	Value          []byte
	NoFencing      bool
	AutoExtend     bool
	ExtendInterval time.Duration
	MaxExtensions  int
	MaxHold        time.Duration
}

// Config is the validated, immutable configuration of the leases of one
// primitive: one key of one backend, limit holders. New fills and checks
// it; nothing changes it afterwards, and the rest of this package trusts
// it. Its Options have every default filled in: Retry is set, and MaxHold
// is 0 for no bound.
type Config struct {
	Options
	Backend *dsync.Backend
	Driver  backends.Driver // the Backend's
	Key     string
	Limit   int

	lines *lines // the backend's local waiting lines (queue.go)
	// ordered: Acquire names its waiter (backends.Request.Waiter), for a
	// lock on a driver that serves waiters in order.
	ordered bool
	// tel is the primitive's telemetry (telemetry.go).
	tel *telemetry.Prim
}

// New checks opts (nil means defaults) for the leases of a primitive of
// kind (Lock, Semaphore or Election) with limit holders on key of b,
// against each other and against the backend's capabilities, with no I/O,
// and returns the configuration with every default filled in: a nil
// opts.Retry becomes the jittered exponential policy of the backend's
// retry_min and retry_max. An election's candidate ID is opts.Value. A bad
// argument is an *dsync.InvalidError naming it; a limit above 1 on a
// backend that offers locks only is dsync.ErrUnsupported.
func New(b *dsync.Backend, kind Kind, key string, limit int, opts *Options) (*Config, error) {
	if b == nil {
		return nil, backends.Invalid("backend", "nil")
	}
	if err := backends.CheckKey(key); err != nil {
		return nil, err
	}
	d := Driver(b)
	caps := d.Capabilities()
	if limit <= 0 {
		return nil, backends.Invalid("size", "%d is not positive", limit)
	}
	if limit > max(caps.MaxLimit, 1) {
		if caps.MaxLimit <= 1 {
			return nil, fmt.Errorf("%w: the %s backend offers locks only (size %d asked)", backends.ErrUnsupported, caps.Name, limit)
		}
		return nil, backends.Invalid("size", "%d exceeds the %s backend's maximum of %d", limit, caps.Name, caps.MaxLimit)
	}
	o := Resolve(b, opts)
	if err := d.CheckTTL(o.TTL); err != nil {
		return nil, err
	}
	if len(o.Value) > backends.MaxValueSize {
		return nil, backends.Invalid("value", "%d bytes exceeds the maximum of %d", len(o.Value), backends.MaxValueSize)
	}
	if o.MaxExtensions < 0 {
		return nil, backends.Invalid("max extensions", "%d is negative", o.MaxExtensions)
	}
	if o.DriftFactor >= 1 {
		return nil, backends.Invalid("drift factor", "%v is not below 1", o.DriftFactor)
	}
	validity := o.TTL - o.Drift(o.TTL)
	switch {
	case validity <= 0:
		return nil, backends.Invalid("ttl", "%v leaves no validity after the clock-drift allowance of %v", o.TTL, o.Drift(o.TTL))
	case o.ExtendInterval < 0 || o.ExtendInterval >= validity:
		return nil, backends.Invalid("extend interval", "%v must be positive and below the validity %v (ttl minus drift)", o.ExtendInterval, validity)
	case o.MaxHold > 0 && o.MaxHold < o.TTL:
		return nil, backends.Invalid("max hold", "%v is below the ttl %v", o.MaxHold, o.TTL)
	}
	o.MaxHold = max(o.MaxHold, 0)
	if o.Retry == nil {
		d := b.Defaults()
		var err error
		o.Retry, err = retry.NewExponential(&retry.ExponentialOptions{Min: d.RetryMin, Max: d.RetryMax})
		if err != nil {
			return nil, backends.Invalid("retry", "%v", err)
		}
	}
	candidate := ""
	if kind == Election {
		candidate = string(o.Value)
	}
	return &Config{
		Options: o, Backend: b, Driver: d, Key: key, Limit: limit,
		lines: linesOf(b), ordered: limit == 1 && caps.Order != backends.NoOrder,
		tel: telemetryOf(b).Prim(kind, key, candidate),
	}, nil
}

// Resolve returns opts (nil means defaults) with the defaults of b and of
// this package filled in for TTL, DriftFactor, DriftMin, ReleaseTimeout and
// MaxHold, unchecked: New's first step, for a primitive that checks an
// option of its own against the TTL or the validity before calling New
// (pass New the caller's opts, not these). b must not be nil.
func Resolve(b *dsync.Backend, opts *Options) Options {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.TTL = orDefault(orDefault(o.TTL, b.Defaults().TTL), DefaultTTL)
	o.DriftFactor = max(orDefault(o.DriftFactor, DefaultDriftFactor), 0)
	o.DriftMin = max(orDefault(o.DriftMin, DefaultDriftMin), 0)
	o.ReleaseTimeout = orDefault(o.ReleaseTimeout, DefaultReleaseTimeout)
	o.MaxHold = orDefault(o.MaxHold, DefaultMaxHold)
	return o
}

func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Drift is the allowance for clock drift subtracted from a validity of
// ttl, by o's resolved DriftFactor and DriftMin.
func (o *Options) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*o.DriftFactor) + o.DriftMin
}
