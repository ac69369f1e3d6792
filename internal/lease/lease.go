// Package lease is the policy of dsync, written once over the driver SPI
// for every primitive (locker, semaphore and leader are thin constructors
// over it):
//
//   - New resolves and checks options against each other and the backend,
//     with no I/O, into an immutable Config;
//   - Config.Attempt makes one attempt: validity = TTL - elapsed - drift,
//     and a release of the token when the outcome is unknown;
//   - Config.Acquire blocks, retrying with jitter and waking on release
//     notices; the waiters of one process and backend line up first come
//     first served, on a line kept on the *dsync.Backend;
//   - Lease is one hold: extension within a bound, auto-extension, loss
//     detection (a refresh found the hold gone, or the local validity ran
//     out, whichever first) and release on a fresh bounded context when the
//     caller's is done.
//
// Every goroutine started here (auto-extension) is stopped and awaited by
// Release; a lease lost or released leaves nothing running. A failed
// Acquire leaves nothing held. The run-while-held helper is
// internal/leased, below the root package, whose Do uses it too.
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
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// NewToken returns a random token, unique across clients and attempts
// (128 bits from crypto/rand, hex encoded).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// NewWaiter returns the name of a blocking acquisition for drivers that
// serve waiters in order (backends.Request.Waiter): the time of the call
// in microseconds, as 16 hex digits so that byte order is time order,
// then 64 random bits that set apart waiters of the same microsecond.
// Waiters whose hosts' clocks disagree by d may be served out of their
// arrival order within d.
func NewWaiter() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%016x-%s", time.Now().UnixMicro(), hex.EncodeToString(b[:]))
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
	timer      *time.Timer // ends the lease when its validity runs out
	stopReason string      // why auto-extension stopped, for the loss message

	done     chan struct{} // closed by end
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
		expires: expires, done: make(chan struct{}),
	}
	l.mu.Lock() // onTimer may run before AfterFunc returns
	l.timer = time.AfterFunc(time.Until(expires), l.onTimer)
	l.mu.Unlock()
	return l
}

// Key implements dsync.Lease.
func (l *Lease) Key() string { return l.key }

// Token implements dsync.Lease.
func (l *Lease) Token() uint64 { return l.fence }

// HoldToken returns the secret token that identifies the hold of h on
// the backend, and whether h has one: h is a lease of this package (one
// of a lock or of a semaphore) or a leader.Leadership (see
// LeadershipLease). It is for the tests and tools that act on a hold
// below the lease layer; applications cannot reach it.
func HoldToken(h any) (string, bool) {
	switch h := h.(type) {
	case *Lease:
		return h.token, true
	case dsync.Leadership:
		if LeadershipLease != nil {
			if l := LeadershipLease(h); l != nil {
				return l.token, true
			}
		}
	}
	return "", false
}

// LeadershipLease returns the lease of a *leader.Leadership, or nil for
// another value. Package leader, which this package cannot import, sets
// it in its init.
var LeadershipLease func(dsync.Leadership) *Lease

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

// Done implements dsync.Lease.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err implements dsync.Lease. A lease whose validity has run out reports
// its loss at once, even when the process was paused and its timer has not
// fired yet.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapse()
	return l.err
}

// end closes the lease with err, for cause. l.mu must be held.
func (l *Lease) end(err error, cause telemetry.Cause) {
	if l.err != nil {
		return
	}
	l.err = err
	l.cfg.tel.Ended(l.acquired, cause, err)
	l.timer.Stop()
	if l.autoCancel != nil {
		l.autoCancel()
	}
	close(l.done)
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
	reason, cause := "its validity ran out", telemetry.Expired
	if l.stopReason != "" {
		reason, cause = reason+" after "+l.stopReason, telemetry.ExtensionBound
	}
	l.end(fmt.Errorf("%w: %q: %s", dsync.ErrLeaseLost, l.key, reason), cause)
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
func (l *Lease) Extend(ctx context.Context) (err error) {
	ctx, call := l.cfg.tel.Start(ctx, telemetry.Extend)
	defer func() { call.Extended(ctx, extendOutcome(err), err) }()
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

	err = l.cfg.Driver.Refresh(ctx, l.key, l.token, l.ttl)

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
			l.timer.Reset(time.Until(exp))
		}
		l.extensions++
		return nil
	case errors.Is(err, dsync.ErrNotHeld):
		l.end(fmt.Errorf("%w: %q: the hold was gone when extending it: %w", dsync.ErrLeaseLost, l.key, err), telemetry.Gone)
		return l.err
	default:
		// Outcome unknown; the lease stays valid until it expires.
		return fmt.Errorf("%w: extending %q: %w", dsync.ErrUnavailable, l.key, err)
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
			// the timer (or the next Extend) ends the lease once it has
			// run out.
			t.Reset(max(interval/4, time.Millisecond))
		}
	}
}

// Release implements dsync.Lease.
func (l *Lease) Release(ctx context.Context) (err error) {
	ctx, call := l.cfg.tel.Start(ctx, telemetry.Release)
	defer func() { call.Released(err) }()
	l.mu.Lock()
	l.lapse()
	lost := l.err
	if errors.Is(lost, dsync.ErrReleased) {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", dsync.ErrNotHeld, l.key)
	}
	l.end(dsync.ErrReleased, telemetry.Released)
	l.mu.Unlock()
	l.autoWG.Wait()

	err = release(ctx, l.cfg, l.key, l.token)
	if lost != nil {
		// The lease was lost before; the hold may still have been there.
		return fmt.Errorf("%w: %w", dsync.ErrNotHeld, lost)
	}
	if err != nil && !errors.Is(err, dsync.ErrNotHeld) && !final(err) {
		// No reply (a timeout, a broken connection): the lease has ended
		// here all the same, and the hold, if it stayed, expires.
		return fmt.Errorf("%w: %q: the release's outcome is unknown, so the hold may stay until it expires: %w", dsync.ErrNotHeld, l.key, err)
	}
	return err
}

// Unavailable returns err of a call on key, marked with
// dsync.ErrUnavailable unless it is nil or already says what happened
// (a dsync sentinel of the SPI: not held, invalid, closed, unsupported).
func Unavailable(key string, err error) error {
	if err == nil || errors.Is(err, dsync.ErrNotHeld) || errors.Is(err, dsync.ErrNotAcquired) || final(err) {
		return err
	}
	return fmt.Errorf("%w: %q: %w", dsync.ErrUnavailable, key, err)
}

// release removes a hold. While ctx is live it bounds the call, together
// with the backend's own request timeout (no timer here: see
// backends.Driver). When ctx is already done, release works on a fresh
// context, so that a cancelled caller still cleans up, bounded by
// cfg.ReleaseTimeout and by the caller's deadline if that is sooner.
func release(ctx context.Context, cfg *Config, key, token string) error {
	ctx, cancel := cleanUpCtx(ctx, cfg)
	defer cancel()
	return cfg.Driver.Release(ctx, key, token)
}

// cleanUpCtx returns ctx for a clean-up call (a release, a waiter's
// Leave) while ctx is live; once it is done, a fresh context bounded by
// cfg.ReleaseTimeout, or by ctx's deadline where that is sooner.
func cleanUpCtx(ctx context.Context, cfg *Config) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	now := time.Now()
	limit := now.Add(cfg.ReleaseTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.After(now) && dl.Before(limit) {
		limit = dl // cancelled before its deadline: keep to it
	}
	return context.WithDeadline(context.WithoutCancel(ctx), limit)
}
