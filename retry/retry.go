// Package retry provides the jittered backoff policies that space out
// acquisition attempts. It is the only package of the module that imports
// github.com/cenkalti/backoff/v4.
//
// A Policy is immutable and safe for concurrent use; every blocking call
// starts a fresh Backoff from it, so no state leaks from one caller to the
// next. Policies never give up on their own unless MaxTries or MaxWait is
// set (unlike backoff.ExponentialBackOff's default 15-minute limit): the
// caller's context is the normal way to bound a wait.
//
// A bad option is an error that names it and matches dsync.ErrInvalid.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/dsync-dev/dsync/backends"
)

// Policy makes backoffs.
type Policy interface {
	// Start returns a fresh Backoff for one blocking call.
	Start() Backoff
}

// Backoff yields the delays between the attempts of one blocking call. It is
// not safe for concurrent use.
type Backoff interface {
	// Next returns the delay before the next attempt, or false when the
	// policy gives up.
	Next() (time.Duration, bool)
}

// Default delays of the policies.
const (
	DefaultMin        = 10 * time.Millisecond
	DefaultMax        = 200 * time.Millisecond
	DefaultMultiplier = 2.0
	DefaultJitter     = 0.5
	DefaultDelay      = 50 * time.Millisecond
)

// ExponentialOptions configure NewExponential. A nil *ExponentialOptions
// means defaults.
type ExponentialOptions struct {
	// Min is the first delay. Default DefaultMin (10ms).
	Min time.Duration
	// Max caps the delay. Default DefaultMax (200ms), raised to Min if
	// below it.
	Max time.Duration
	// Multiplier grows the delay after each attempt. Default 2; must be >= 1.
	Multiplier float64
	// Jitter randomises each delay within ±Jitter of its nominal value, so
	// that contenders desynchronise. Default 0.5; 0 is not allowed (use a
	// small value such as 0.01 for near-fixed delays); must be < 1.
	Jitter float64
	// MaxTries bounds the number of attempts (the first one included).
	// Default 0: no bound.
	MaxTries int
	// MaxWait bounds the total time spent waiting between attempts, since
	// Start. Default 0: no bound.
	MaxWait time.Duration
}

// ConstantOptions configure NewConstant. A nil *ConstantOptions means
// defaults.
type ConstantOptions struct {
	// Delay is the nominal delay. Default DefaultDelay (50ms).
	Delay time.Duration
	// Jitter as in ExponentialOptions. Default 0.5.
	Jitter float64
	// MaxTries as in ExponentialOptions. Default 0: no bound.
	MaxTries int
	// MaxWait as in ExponentialOptions. Default 0: no bound.
	MaxWait time.Duration
}

type policy struct {
	min, max   time.Duration
	multiplier float64
	jitter     float64
	maxTries   int
	maxWait    time.Duration
}

// NewExponential returns a jittered exponential policy: Min, Min*Multiplier,
// ... up to Max, each delay drawn uniformly within ±Jitter of its nominal
// value.
func NewExponential(opts *ExponentialOptions) (Policy, error) {
	o := ExponentialOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Min == 0 {
		o.Min = DefaultMin
	}
	if o.Max == 0 {
		o.Max = max(DefaultMax, o.Min)
	}
	if o.Multiplier == 0 {
		o.Multiplier = DefaultMultiplier
	}
	if o.Jitter == 0 {
		o.Jitter = DefaultJitter
	}
	p := &policy{min: o.Min, max: o.Max, multiplier: o.Multiplier, jitter: o.Jitter, maxTries: o.MaxTries, maxWait: o.MaxWait}
	if err := p.validate("min"); err != nil {
		return nil, err
	}
	return p, nil
}

// NewConstant returns a jittered constant policy: every delay is drawn
// uniformly within ±Jitter of Delay.
func NewConstant(opts *ConstantOptions) (Policy, error) {
	o := ConstantOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Delay == 0 {
		o.Delay = DefaultDelay
	}
	if o.Jitter == 0 {
		o.Jitter = DefaultJitter
	}
	p := &policy{min: o.Delay, max: o.Delay, multiplier: 1, jitter: o.Jitter, maxTries: o.MaxTries, maxWait: o.MaxWait}
	if err := p.validate("delay"); err != nil {
		return nil, err
	}
	return p, nil
}

// Default is the jittered exponential policy with all defaults.
func Default() Policy {
	p, _ := NewExponential(nil)
	return p
}

// validate checks p, whose first delay the options name minName.
func (p *policy) validate(minName string) error {
	switch {
	case p.min <= 0:
		return invalid(minName, "%v is not positive", p.min)
	case p.max < p.min:
		return invalid("max", "%v is below the minimum delay %v", p.max, p.min)
	case p.multiplier < 1:
		return invalid("multiplier", "%v is below 1", p.multiplier)
	case p.jitter <= 0 || p.jitter >= 1:
		return invalid("jitter", "%v is not in (0, 1)", p.jitter)
	case p.maxTries < 0:
		return invalid("max tries", "%d is negative", p.maxTries)
	case p.maxWait < 0:
		return invalid("max wait", "%v is negative", p.maxWait)
	}
	return nil
}

// invalid is the error of a bad option of a policy: a
// *backends.InvalidError (dsync.InvalidError), which matches
// dsync.ErrInvalid, naming the option.
func invalid(field, format string, args ...any) error {
	return backends.Invalid("retry "+field, format, args...)
}

func (p *policy) Start() Backoff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.min),
		backoff.WithMaxInterval(p.max),
		backoff.WithMultiplier(p.multiplier),
		backoff.WithRandomizationFactor(p.jitter),
		backoff.WithMaxElapsedTime(0), // never give up on our behalf
	)
	return &run{p: p, b: b, start: time.Now()}
}

type run struct {
	p     *policy
	b     *backoff.ExponentialBackOff
	start time.Time
	tries int
}

func (r *run) Next() (time.Duration, bool) {
	r.tries++
	if r.p.maxTries > 0 && r.tries >= r.p.maxTries {
		return 0, false
	}
	d := r.b.NextBackOff()
	if r.p.maxWait > 0 {
		left := r.p.maxWait - time.Since(r.start)
		if left <= 0 {
			return 0, false
		}
		d = min(d, left)
	}
	return d, true
}

// Wait sleeps for d, returning early with nil when wake delivers (a release
// notice; nil channel: none), or with ctx's error when ctx ends first.
func Wait(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
