// Package lease is the lifecycle of one hold, written once over the driver
// SPI for every primitive: acquisition attempts with validity and drift,
// blocking acquisition with jittered retry and release wake-ups, extension
// with a bound, auto-extension, loss detection and release.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// Config is the validated, immutable configuration shared by every lease of
// one primitive. The constructors in locker, semaphore and leader fill and
// check it; this package trusts it.
type Config struct {
	Driver backends.Driver
	// Request template: Limit, Value and Fence; Key, Token and TTL are set
	// per attempt.
	Limit int
	Value []byte
	Fence bool
	// TTL is the requested time to live.
	TTL time.Duration
	// DriftFactor and DriftMin make the clock-drift allowance subtracted
	// from every validity: TTL*DriftFactor + DriftMin.
	DriftFactor float64
	DriftMin    time.Duration
	// AttemptTimeout bounds one driver call of an acquisition attempt.
	AttemptTimeout time.Duration
	// ReleaseTimeout bounds a release, and the clean-up of a failed
	// attempt.
	ReleaseTimeout time.Duration
	// ExtendInterval is the auto-extension period; zero means a third of
	// the granted TTL.
	ExtendInterval time.Duration
	// MaxExtensions and MaxHold bound extension; zero means no bound.
	MaxExtensions int
	MaxHold       time.Duration
}

// Drift is the allowance for clock drift subtracted from a validity.
func (c *Config) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.DriftFactor) + c.DriftMin
}

// NewToken returns a random token, unique across clients and attempts
// (128 bits from crypto/rand, hex encoded).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// Lease implements dsync.Lease over one hold.
type Lease struct {
	cfg      *Config
	key      string
	token    string
	fence    uint64
	ttl      time.Duration // granted by the server
	acquired time.Time     // start of the attempt that obtained the hold

	mu         sync.Mutex // protects the fields below
	expires    time.Time
	extensions int
	err        error       // nil while held
	timer      *time.Timer // ends the lease when its validity runs out; armed by Done
	stopReason string      // why auto-extension stopped, for the loss message

	done     chan struct{} // made by Done, closed by end; protected by mu
	autoOnce sync.Once
	autoWG   sync.WaitGroup // the auto-extension goroutine
	// autoCtx ends when the lease does, cutting short an extension in
	// flight so that Release never waits for a slow server. It is made by
	// AutoExtend (under mu), so leases that never auto-extend pay nothing.
	autoCtx    context.Context
	autoCancel context.CancelFunc // nil until AutoExtend; protected by mu
}

var _ dsync.Lease = (*Lease)(nil)

func newLease(cfg *Config, key, token string, g backends.Grant, start time.Time, expires time.Time) *Lease {
	l := &Lease{
		cfg: cfg, key: key, token: token, fence: g.Fence, ttl: g.TTL, acquired: start,
		expires: expires,
	}
	return l
}

// Key implements dsync.Lease.
func (l *Lease) Key() string { return l.key }

// Token implements dsync.Lease.
func (l *Lease) Token() uint64 { return l.fence }

// HoldToken is the secret token that identifies the hold on the backend.
func (l *Lease) HoldToken() string { return l.token }

// TTL is the time to live the backend granted.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Expires implements dsync.Lease.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Validity implements dsync.Lease.
func (l *Lease) Validity() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapse()
	if l.err != nil {
		return 0
	}
	return max(time.Until(l.expires), 0)
}

// Done implements dsync.Lease. The channel and the timer that closes it
// when the validity runs out are made on the first call: a lease whose
// Done is never asked for costs no timer (the other methods check the
// validity themselves).
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.lapse()
		l.done = make(chan struct{})
		if l.err != nil {
			close(l.done)
		} else {
			l.timer = time.AfterFunc(time.Until(l.expires), l.onTimer)
		}
	}
	return l.done
}

// Err implements dsync.Lease. A lease whose validity has run out reports
// its loss at once, even when the process was paused and its timer has not
// fired yet.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapse()
	return l.err
}

// end closes the lease with err. l.mu must be held.
func (l *Lease) end(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.autoCancel != nil {
		l.autoCancel()
	}
	if l.done != nil {
		close(l.done)
	}
}

// onTimer runs when the validity may have run out.
func (l *Lease) onTimer() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if left := time.Until(l.expires); left > 0 { // extended meanwhile
		l.timer.Reset(left)
		return
	}
	l.lapse()
}

// lapse ends the lease as lost if its validity has run out. Every method
// that answers whether the lease is held calls it first: after a pause of
// the process (SIGSTOP, a long GC, a suspended VM) the timer fires late,
// and the answer must not wait for it. l.mu must be held.
func (l *Lease) lapse() {
	if l.err != nil || time.Now().Before(l.expires) {
		return
	}
	reason := "its validity ran out"
	if l.stopReason != "" {
		reason += " after " + l.stopReason
	}
	l.end(fmt.Errorf("%w: %q: %s", dsync.ErrLeaseLost, l.key, reason))
}

// checkBound reports ErrExtendLimit when one more extension would pass a
// bound. l.mu must be held.
func (l *Lease) checkBound(now time.Time) error {
	if n := l.cfg.MaxExtensions; n > 0 && l.extensions >= n {
		return fmt.Errorf("%w: %q: %d extensions made (maximum %d)", dsync.ErrExtendLimit, l.key, l.extensions, n)
	}
	if h := l.cfg.MaxHold; h > 0 && now.Add(l.ttl).After(l.acquired.Add(h)) {
		return fmt.Errorf("%w: %q: another extension would hold it past the maximum hold time of %v", dsync.ErrExtendLimit, l.key, h)
	}
	return nil
}

// Extend implements dsync.Lease.
func (l *Lease) Extend(ctx context.Context) error {
	l.mu.Lock()
	l.lapse()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		if errors.Is(err, dsync.ErrReleased) {
			return fmt.Errorf("%w: %q was released", dsync.ErrNotHeld, l.key)
		}
		return err
	}
	start := time.Now()
	if err := l.checkBound(start); err != nil {
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()

	err := l.cfg.Driver.Refresh(ctx, l.key, l.token, l.ttl)

	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		if l.err != nil { // ended while the refresh was in flight
			if errors.Is(l.err, dsync.ErrReleased) {
				return fmt.Errorf("%w: %q was released", dsync.ErrNotHeld, l.key)
			}
			return l.err
		}
		if exp := start.Add(l.ttl - l.cfg.Drift(l.ttl)); exp.After(l.expires) {
			l.expires = exp
			if l.timer != nil {
				l.timer.Reset(time.Until(exp))
			}
		}
		l.extensions++
		return nil
	case errors.Is(err, dsync.ErrNotHeld):
		l.end(fmt.Errorf("%w: %q: the hold was gone when extending it: %w", dsync.ErrLeaseLost, l.key, err))
		return l.err
	default:
		return err // outcome unknown; the lease stays valid until it expires
	}
}

// AutoExtend implements dsync.Lease.
func (l *Lease) AutoExtend() {
	l.autoOnce.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return // ended already: nothing to extend
		}
		l.autoCtx, l.autoCancel = context.WithCancel(context.Background())
		l.autoWG.Add(1)
		go l.autoExtend()
	})
}

func (l *Lease) autoExtend() {
	defer l.autoWG.Done()
	interval := l.cfg.ExtendInterval
	if interval <= 0 {
		interval = l.ttl / 3
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.autoCtx.Done(): // the lease has ended
			return
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(l.autoCtx, l.Expires())
		err := l.Extend(ctx)
		cancel()
		switch {
		case err == nil:
			t.Reset(interval)
		case errors.Is(err, dsync.ErrExtendLimit):
			l.mu.Lock()
			l.stopReason = "auto-extension stopped: " + err.Error()
			l.mu.Unlock()
			return
		case errors.Is(err, dsync.ErrLeaseLost), errors.Is(err, dsync.ErrNotHeld):
			return
		default:
			// Transient failure: try again soon, while validity lasts;
			// the next Extend (or Done's timer) ends the lease once it
			// has run out.
			t.Reset(max(interval/4, time.Millisecond))
		}
	}
}

// Release implements dsync.Lease.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	l.lapse()
	lost := l.err
	if errors.Is(lost, dsync.ErrReleased) {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", dsync.ErrNotHeld, l.key)
	}
	l.end(dsync.ErrReleased)
	l.mu.Unlock()
	l.autoWG.Wait()

	err := release(ctx, l.cfg, l.key, l.token)
	if lost != nil {
		// The lease was lost before; the hold may still have been there.
		return fmt.Errorf("%w: %w", dsync.ErrNotHeld, lost)
	}
	return err
}

// release removes a hold within cfg.ReleaseTimeout, on a fresh context when
// ctx is already done, so that a cancelled caller still cleans up.
func release(ctx context.Context, cfg *Config, key, token string) error {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := clockFor(cfg.Driver).Within(ctx, cfg.ReleaseTimeout)
	defer cancel()
	return cfg.Driver.Release(ctx, key, token)
}
