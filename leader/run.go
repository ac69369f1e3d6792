package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/leased"
)

// DefaultRecampaignDelay is RunOptions.RecampaignDelay's default for an
// election that is not an *Election.
const DefaultRecampaignDelay = time.Second

// RunOptions configure Run. A nil *RunOptions means defaults.
type RunOptions struct {
	// OnStarted is called with the term's number when a term starts, just
	// before fn, on Run's goroutine. Optional.
	OnStarted func(term uint64)
	// OnStopped is called once for every term whose OnStarted was called,
	// after fn returned and leadership was resigned, with the term's
	// outcome: nil, or fn's error joined with the loss of leadership
	// (dsync.ErrLeaseLost) and a failed resignation. Optional.
	OnStopped func(term uint64, err error)
	// StopOnError makes Run return fn's error when fn fails while still
	// leading. By default Run resigns and campaigns again. An error fn
	// returns after leadership was lost never stops Run.
	StopOnError bool
	// RecampaignDelay is how long Run waits after fn returned, before it
	// campaigns again: the time for another candidate, woken by the
	// resignation, to take over, and a bound on how fast a failing fn is
	// retried. Default: the election's RetryPeriod for an *Election, else
	// DefaultRecampaignDelay (1s). Negative means no delay. After a loss of
	// leadership Run campaigns again at once.
	RecampaignDelay time.Duration
}

// Run leads e for as long as ctx lasts: it campaigns (blocking), calls fn
// with the term and a context that is cancelled, with the loss as its
// cause, the moment leadership is lost, resigns when fn returns, and
// campaigns again. fn's context also ends with ctx; fn should return then.
//
// Run returns ctx's error once ctx ends, after resigning the term in
// progress. It returns earlier only when fn fails while leading and
// RunOptions.StopOnError is set (fn's error), or when Campaign fails for a
// reason other than ctx: bad configuration, a closed backend, a duplicate
// candidate ID (ErrDuplicateID). OnStarted and OnStopped are called in
// pairs, around each term's fn; a panic in fn still resigns the term and
// calls OnStopped before it goes on.
func Run(ctx context.Context, e dsync.LeaderElection, fn func(ctx context.Context, term uint64) error, opts *RunOptions) error {
	switch {
	case e == nil:
		return backends.Invalid("election", "nil")
	case fn == nil:
		return backends.Invalid("fn", "nil")
	}
	o := RunOptions{}
	if opts != nil {
		o = *opts
	}
	if o.RecampaignDelay == 0 {
		o.RecampaignDelay = DefaultRecampaignDelay
		if el, ok := e.(*Election); ok {
			o.RecampaignDelay = el.RetryPeriod()
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l, err := e.Campaign(ctx)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return err
		}
		lost, err := lead(ctx, l, fn, &o)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case lost:
			continue
		case err != nil && o.StopOnError:
			return err
		}
		if o.RecampaignDelay > 0 {
			t := time.NewTimer(o.RecampaignDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
}

// lead runs one term under leased.Run: fn under a context cancelled on
// loss, then Resign, with the hooks around. It reports whether leadership
// was lost, and fn's error.
func lead(ctx context.Context, l dsync.Leadership, fn func(context.Context, uint64) error, o *RunOptions) (lost bool, fnErr error) {
	term := l.Term()
	started, returned := false, false
	defer func() {
		if started && !returned && o.OnStopped != nil {
			o.OnStopped(term, fmt.Errorf("leader: fn panicked in term %d", term))
		}
	}()
	outcome := leased.Run(ctx, resigning{l}, func(ctx context.Context) error {
		if o.OnStarted != nil {
			o.OnStarted(term)
		}
		started = true
		fnErr = fn(ctx, term)
		return fnErr
	})
	returned = true
	if started && o.OnStopped != nil {
		o.OnStopped(term, outcome)
	}
	return errors.Is(l.Err(), dsync.ErrLeaseLost), fnErr
}

// resigning is a term as leased.Run holds it: releasing it resigns,
// and AutoExtend has nothing to start (a term renews itself).
type resigning struct{ dsync.Leadership }

func (t resigning) Release(ctx context.Context) error { return t.Resign(ctx) }
func (resigning) AutoExtend()                         {}
