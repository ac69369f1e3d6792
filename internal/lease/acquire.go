package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
	"github.com/dsync-dev/dsync/retry"
)

// Attempt makes one attempt to obtain a hold on c.Key. On plain contention
// it returns the bare dsync.ErrNotAcquired. If the outcome is unknown (the
// call failed or timed out) or the hold came back with no validity left,
// it releases the token before returning, since the server may have
// applied it, and the attempt counts as failed. Any failure but a final
// one (dsync.ErrInvalid, ErrClosed, ErrUnsupported) matches
// dsync.ErrNotAcquired, and dsync.ErrUnavailable too when the backend
// could not decide (see undecided). If ctx is already done it
// sends nothing and returns c.notStarted's error. The attempt is bounded by
// ctx and by the backend's own request timeout (see backends.Driver): no
// timer of its own.
func (c *Config) Attempt(ctx context.Context) (*Lease, error) {
	return c.attempt(ctx, "")
}

// attempt is Attempt on behalf of waiter (backends.Request.Waiter), or of
// no waiter when "".
func (c *Config) attempt(ctx context.Context, waiter string) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.notStarted(err)
	}
	token := NewToken()
	req := backends.Request{Key: c.Key, Token: token, Value: c.Value, TTL: c.TTL, Limit: c.Limit, Fence: !c.NoFencing, Waiter: waiter}
	start := time.Now()
	g, err := c.Driver.Acquire(ctx, req)
	if err != nil {
		if !final(err) && !errors.Is(err, dsync.ErrNotAcquired) {
			_ = release(ctx, c, c.Key, token)
		}
		return nil, c.undecided(err)
	}
	expires := start.Add(g.TTL - c.Drift(g.TTL))
	if !time.Now().Before(expires) {
		_ = release(ctx, c, c.Key, token)
		return nil, &unavailableError{key: c.Key, err: fmt.Errorf("the attempt took longer than the lease's validity (ttl %v)", g.TTL)}
	}
	return newLease(c, c.Key, token, g, start, expires), nil
}

// TryAcquire makes one attempt, like Attempt, and starts auto-extension if
// c.AutoExtend. Plain contention is an error matching dsync.ErrNotAcquired
// that says what was taken. Any failure but a final one (dsync.ErrInvalid,
// ErrClosed, ErrUnsupported) matches dsync.ErrNotAcquired, and ctx's error
// when ctx ended, whatever the driver returned; it also matches
// dsync.ErrUnavailable when the backend could not decide.
func (c *Config) TryAcquire(ctx context.Context) (l *Lease, err error) {
	ctx, call := c.tel.Start(ctx, telemetry.TryAcquire)
	defer func() { call.Acquired(ctx, l.fenceOrZero(), err) }()
	call.Attempting()
	l, err = c.Attempt(ctx)
	call.Attempted(err)
	switch {
	case err == nil:
		return c.started(l, nil)
	case err == dsync.ErrNotAcquired: // the bare sentinel: plain contention
		return nil, fmt.Errorf("%w: %s", err, c.taken())
	case final(err):
		return nil, err
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return nil, c.gaveUp(ctx.Err(), err)
	}
	return nil, err // marked by attempt
}

// Acquire blocks until it obtains a hold on c.Key, retrying on contention
// and on transient failures with c.Retry's jittered delays, and waking
// early when the driver reports a release. Waiters of one process and
// backend line up first come first served, and only the first contends on
// the backend. It gives up when ctx ends or the policy does, with an error
// matching dsync.ErrNotAcquired (and ctx's error when that was the cause);
// nothing is left held then. The error also matches dsync.ErrUnavailable
// when the last attempt that ran its course found the backend unable to
// decide. With ctx already done it returns at once, with no I/O. Errors
// no retry can cure (dsync.ErrInvalid, ErrClosed, ErrUnsupported) end it
// at once.
//
// between, when not nil, runs after every attempt that met contention
// (not one that found the backend unavailable), before the wait; an error
// from it ends Acquire and is returned as is.
//
// The first attempt goes out at once; only when it fails does Acquire
// subscribe to release notices, and then it attempts once more before it
// waits, so that a release between the first attempt and the subscription
// is not missed. The subscription belongs to the process's waiting line,
// and the next waiter to reach its head uses it as it is; when the line
// ends, it stays for a second, for the process's next Acquire of the key.
// An uncontended Acquire costs one attempt, no subscription and no backoff.
//
// On a driver that serves waiters in order (backends.Capabilities.Order),
// Acquire is the one keeper of its place in the backend's line. Its
// attempts name the call's waiter (NewWaiter, drawn when Acquire is
// called), so that a refusal puts it in line; all but the first, which
// leaves the line alone (the cheaper attempt, when uncontended) and,
// refused, is followed at once by one in line. The first names the waiter
// too when the key's notices are still kept from a contended Acquire a
// moment ago, unless a waiter of this process handed the call its turn: a
// refusal is then likely, but a local hand-over is won most often by that
// second attempt at once, and a place in line would make it wait for the
// notice (BenchmarkLinger, bench's contention rows). It wakes only for a release notice that names no heir, or its
// waiter. An Acquire that gives up after an attempt in line leaves the
// backend's line (Driver.Leave, on a fresh context bounded like a release
// when ctx is done).
func (c *Config) Acquire(ctx context.Context, between func(context.Context) error) (l *Lease, err error) {
	ctx, call := c.tel.Start(ctx, telemetry.Acquire)
	defer func() { call.Acquired(ctx, l.fenceOrZero(), err) }()
	if err := ctx.Err(); err != nil {
		return nil, c.notStarted(err)
	}
	var waiter string
	if c.ordered {
		waiter = NewWaiter()
	}
	turn, err := waitTurn(ctx, c)
	if err != nil {
		return nil, c.gaveUp(err, errors.New("waiting behind other waiters of this process"))
	}
	defer turn.pass()
	inLine := false // an attempt named waiter: it may have a place in the backend's line
	defer func() {
		if err != nil && inLine {
			c.leave(ctx, waiter)
		}
	}()
	var notices <-chan backends.Notice
	watched := false
	// A key whose notices the line already has was contended a moment
	// ago by another process: the first attempt joins the line too.
	contended := waiter != "" && !turn.handed && turn.subscribed()
	var prev error      // the last attempt that ran its course
	var b retry.Backoff // started at the first wait
	for {
		var named string // the waiter this attempt names
		if prev != nil || contended {
			named = waiter
		}
		call.Attempting()
		l, err := c.attempt(ctx, named)
		call.Attempted(err)
		if err == nil {
			return c.started(l, nil)
		}
		if final(err) {
			return nil, err
		}
		inLine = inLine || named != ""
		if ctx.Err() != nil {
			// An attempt cut short by ctx tells less (no quorum, say)
			// than the one before it.
			return nil, c.gaveUp(ctx.Err(), cmp.Or(prev, err))
		}
		firstRefusal := prev == nil
		prev = err
		if between != nil && !errors.Is(err, dsync.ErrUnavailable) {
			if herr := between(ctx); herr != nil {
				return nil, herr
			}
		}
		if !watched {
			watched = true
			if sub, fresh, serr := turn.watch(ctx, c.Driver); serr == nil {
				notices = sub.C()
				if fresh {
					continue // attempt again now that no release can slip by
				}
			}
		}
		if firstRefusal && named == "" && waiter != "" && err == dsync.ErrNotAcquired {
			continue // attempt again at once, in line
		}
		if b == nil {
			b = c.Retry.Start()
		}
		d, ok := b.Next()
		if !ok {
			return nil, c.gaveUp(errors.New("the retry policy gave up"), err)
		}
		if werr := waitNotice(ctx, d, notices, waiter); werr != nil {
			return nil, c.gaveUp(werr, err)
		}
	}
}

// waitNotice waits for d, or until a release notice for waiter (one that
// names no heir, or waiter) arrives on notices, or ctx ends (its error).
// A notice naming another heir is no reason to wake: that heir alone can
// take the lock now.
func waitNotice(ctx context.Context, d time.Duration, notices <-chan backends.Notice, waiter string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case n := <-notices:
			if n.Heir == "" || n.Heir == waiter {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leave takes waiter out of the backend's line after a failed Acquire. A
// place left behind lapses on its own, so the error is dropped.
func (c *Config) leave(ctx context.Context, waiter string) {
	ctx, cancel := cleanUpCtx(ctx, c)
	defer cancel()
	_ = c.Driver.Leave(ctx, c.Key, waiter)
}

// started starts auto-extension of a lease just acquired, if configured.
func (c *Config) started(l *Lease, err error) (*Lease, error) {
	if err != nil {
		return nil, err
	}
	if c.AutoExtend {
		l.AutoExtend()
	}
	return l, nil
}

// final reports errors that no retry can cure.
func final(err error) bool {
	return errors.Is(err, dsync.ErrInvalid) || errors.Is(err, dsync.ErrClosed) || errors.Is(err, dsync.ErrUnsupported)
}

// undecided marks err, the error of a failed attempt, as the SPI says
// (backends.Driver.Acquire): unchanged when it is final, or when it
// matches dsync.ErrNotAcquired and not dsync.ErrUnavailable (contention,
// bare or with the driver's detail); otherwise the backend could not
// decide, and the error is an *unavailableError.
func (c *Config) undecided(err error) error {
	if final(err) || errors.Is(err, dsync.ErrNotAcquired) && !errors.Is(err, dsync.ErrUnavailable) {
		return err
	}
	return &unavailableError{key: c.Key, err: err}
}

// unavailableError is an attempt on key that the backend could not decide
// (a timeout, a broken connection, no quorum). It matches
// dsync.ErrNotAcquired, dsync.ErrUnavailable and whatever err matches.
type unavailableError struct {
	key string
	err error // the driver's
}

func (e *unavailableError) Error() string {
	// The driver's error may say what this one says already.
	msg := e.err.Error()
	for _, p := range []string{dsync.ErrNotAcquired.Error() + ": ", dsync.ErrUnavailable.Error() + ": "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return fmt.Sprintf("%v: backend unavailable: %q: %s", dsync.ErrNotAcquired, e.key, msg)
}

func (e *unavailableError) Is(target error) bool {
	return target == dsync.ErrNotAcquired || target == dsync.ErrUnavailable
}

func (e *unavailableError) Unwrap() error { return e.err }

// gaveUp builds the error of an Acquire that stopped trying: it matches
// dsync.ErrNotAcquired, cause (ctx's error, typically) and the last
// attempt's error, whose detail (a lost quorum, a network error) it keeps,
// dsync.ErrUnavailable included.
func (c *Config) gaveUp(cause, last error) error {
	if last == dsync.ErrNotAcquired { // the bare sentinel: plain contention
		return fmt.Errorf("%w: %s: %w", dsync.ErrNotAcquired, c.taken(), cause)
	}
	return &gaveUpError{key: c.Key, cause: cause, last: last}
}

// gaveUpError is the error of an Acquire on key that stopped trying for
// cause after an attempt that failed with last. It matches
// dsync.ErrNotAcquired, and whatever cause and last match.
type gaveUpError struct {
	key         string
	cause, last error
}

func (e *gaveUpError) Error() string {
	last := strings.TrimPrefix(e.last.Error(), dsync.ErrNotAcquired.Error()+": ") // said once
	return fmt.Sprintf("%v: %q: %v (last attempt: %s)", dsync.ErrNotAcquired, e.key, e.cause, last)
}

func (e *gaveUpError) Is(target error) bool { return target == dsync.ErrNotAcquired }

func (e *gaveUpError) Unwrap() []error { return []error{e.cause, e.last} }

// notStarted is the error of an acquisition whose ctx was done before it
// began: it matches dsync.ErrNotAcquired and ctx's error.
func (c *Config) notStarted(ctxErr error) error {
	return fmt.Errorf("%w: %q: %w", dsync.ErrNotAcquired, c.Key, ctxErr)
}

// taken describes plain contention for messages: a lock held by another
// owner, or a semaphore with every permit taken.
func (c *Config) taken() string {
	if c.Limit > 1 {
		return fmt.Sprintf("all %d permits of %q are taken", c.Limit, c.Key)
	}
	return fmt.Sprintf("%q is held by another owner", c.Key)
}
