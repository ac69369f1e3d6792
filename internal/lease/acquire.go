package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/retry"
)

// Attempt makes one attempt to obtain a hold on key. On contention it
// returns an error matching dsync.ErrNotAcquired. If the outcome is unknown
// (the call failed or timed out) or the hold came back with no validity
// left, it releases the token before returning, since the server may have
// applied it, and the attempt counts as failed.
func Attempt(ctx context.Context, cfg *Config, key string) (*Lease, error) {
	token := NewToken()
	req := backends.Request{Key: key, Token: token, Value: cfg.Value, TTL: cfg.TTL, Limit: cfg.Limit, Fence: cfg.Fence}
	start := time.Now()
	actx, cancel := clockFor(cfg.Driver).Within(ctx, cfg.AttemptTimeout)
	g, err := cfg.Driver.Acquire(actx, req)
	cancel()
	if err != nil {
		if !final(err) && !errors.Is(err, dsync.ErrNotAcquired) {
			_ = release(ctx, cfg, key, token)
		}
		return nil, err
	}
	expires := start.Add(g.TTL - cfg.Drift(g.TTL))
	if !time.Now().Before(expires) {
		_ = release(ctx, cfg, key, token)
		return nil, fmt.Errorf("%w: %q: the attempt took longer than the lease's validity (ttl %v)", dsync.ErrNotAcquired, key, g.TTL)
	}
	return newLease(cfg, key, token, g, start, expires), nil
}

// final reports errors that no retry can cure.
func final(err error) bool {
	return errors.Is(err, dsync.ErrInvalid) || errors.Is(err, dsync.ErrClosed) || errors.Is(err, dsync.ErrUnsupported)
}

// Acquire blocks until it obtains a hold on key, retrying on contention and
// on transient failures with the policy's jittered delays, and waking early
// when the driver reports a release of key. Waiters of one process line up
// first come first served, and only the first contends on the backend. It
// gives up when ctx ends or the policy does, with an error matching
// dsync.ErrNotAcquired (and ctx's error when that was the cause); nothing
// is left held then.
//
// The first attempt goes out at once; only when it fails does Acquire
// subscribe to release notices, and then it attempts once more before it
// waits, so that a release between the first attempt and the subscription
// is not missed. An uncontended Acquire therefore costs one attempt.
func Acquire(ctx context.Context, cfg *Config, key string, policy retry.Policy) (*Lease, error) {
	turn, err := waitTurn(ctx, cfg.Driver, key)
	if err != nil {
		return nil, gaveUp(cfg, key, err, errors.New("waiting behind other waiters of this process"))
	}
	defer passTurn(turn)
	var wake <-chan struct{}
	subscribed := false
	var prev error      // the last attempt that ran its course
	var b retry.Backoff // started at the first wait: an uncontended Acquire needs none
	for {
		l, err := Attempt(ctx, cfg, key)
		if err == nil {
			return l, nil
		}
		if final(err) {
			return nil, err
		}
		if ctx.Err() != nil {
			// An attempt cut short by ctx tells less (no quorum, say)
			// than the one before it.
			return nil, gaveUp(cfg, key, ctx.Err(), cmp.Or(prev, err))
		}
		prev = err
		if !subscribed {
			subscribed = true
			if sub, serr := cfg.Driver.WatchReleases(ctx, key); serr == nil {
				defer sub.Close()
				wake = sub.C()
				continue // attempt again now that no release can slip by
			}
		}
		if b == nil {
			b = policy.Start()
		}
		d, ok := b.Next()
		if !ok {
			return nil, gaveUp(cfg, key, errors.New("the retry policy gave up"), err)
		}
		if werr := retry.Wait(ctx, d, wake); werr != nil {
			return nil, gaveUp(cfg, key, werr, err)
		}
	}
}

// gaveUp builds the error of an Acquire that stopped trying: it matches
// dsync.ErrNotAcquired, cause (ctx's error, typically) and the last
// attempt's error, whose detail (a lost quorum, a network error) it keeps.
func gaveUp(cfg *Config, key string, cause, last error) error {
	if last == dsync.ErrNotAcquired { // the bare sentinel: plain contention
		return fmt.Errorf("%w: %s: %w", dsync.ErrNotAcquired, Taken(cfg, key), cause)
	}
	return fmt.Errorf("%w: %q: %w (last attempt: %w)", dsync.ErrNotAcquired, key, cause, last)
}

// Taken describes plain contention on key for messages: a lock held by
// another owner, or a semaphore with every permit taken.
func Taken(cfg *Config, key string) string {
	if cfg.Limit > 1 {
		return fmt.Sprintf("all %d permits of %q are taken", cfg.Limit, key)
	}
	return fmt.Sprintf("%q is held by another owner", key)
}
