package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// A selector says whether a fan-out sends its request to a node: nil, or
// the error the node counts with instead.
type selector func(n *node, now time.Time) error

// everyServer selects one node per server, quarantined ones included:
// every node but the aliases.
func everyServer(n *node, _ time.Time) error { return n.aliasOf() }

// voting selects the nodes whose vote counts: neither aliases nor in
// restart quarantine.
func voting(n *node, now time.Time) error { return n.excluded(now) }

// fanOut runs op on the selected nodes in parallel, each bounded by nt (and
// Close) but not by ctx, and returns how many succeeded and the others'
// errors once all have returned or ctx has ended; then the nodes that have
// not answered count as failed with ctx's error, and their op goes on in
// the background within nt. Each node's op is recorded as what (its
// latency, outcome, and a child of the span in ctx).
func (d *driver) fanOut(ctx context.Context, nt time.Duration, sel selector, what telemetry.NodeOp, op func(context.Context, *node) error) (int, *multierror.Error) {
	_, ok, errs := fanOutValues(d, ctx, nt, sel, what, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, op(ctx, n)
	})
	return ok, errs
}

// nodeResult is one node's answer in fanOutValues.
type nodeResult[T any] struct {
	i   int
	v   T
	err error
}

// fanOutValues is fanOut for ops that return a value: it also returns
// each node's value, by index (the zero value for a node that failed or
// did not answer in time). An op must not touch the caller's variables,
// since it may still run after fanOutValues has returned.
func fanOutValues[T any](d *driver, ctx context.Context, nt time.Duration, sel selector, what telemetry.NodeOp, op func(context.Context, *node) (T, error)) ([]T, int, *multierror.Error) {
	results := make(chan nodeResult[T], len(d.nodes))
	values := make([]T, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var waiting uint64 // by node index
	now := time.Now()
	for i, n := range d.nodes {
		if err := sel(n, now); err != nil {
			errs[i] = err
			continue
		}
		nctx, cancel := d.nodeCtx(nt)
		started := d.spawn(func() {
			sctx, call := d.tel.Start(ctx, nctx, n.index, what)
			v, err := op(sctx, n)
			call.End(sctx, err)
			cancel()
			now := time.Now()
			if err == nil || errors.Is(err, backends.ErrNotAcquired) || errors.Is(err, backends.ErrNotHeld) {
				n.answered(now)
			}
			if err == nil {
				// A request that ran on a new connection (the node's
				// first, or one after a restart) answered for the process
				// that connection reached, which the selector can judge
				// only now that its hook has read the run_id and uptime.
				err = sel(n, now)
			}
			results <- nodeResult[T]{i, v, err}
		})
		if started {
			waiting |= 1 << i
		} else {
			errs[i] = backends.ErrClosed
			cancel()
		}
	}
collect:
	for waiting != 0 {
		select {
		case r := <-results:
			values[r.i], errs[r.i] = r.v, r.err
			waiting &^= 1 << r.i
		case <-ctx.Done():
			for i := range d.nodes {
				if waiting&(1<<i) != 0 {
					errs[i] = ctx.Err()
				}
			}
			break collect
		}
	}
	var merr *multierror.Error
	for i, err := range errs {
		if err != nil {
			merr = appendErr(merr, &NodeError{Index: i, Addr: d.nodes[i].addr, Err: err})
		}
	}
	return values, len(d.nodes) - count(merr), merr
}

// appendErr aggregates per-node errors, formatted on one line.
func appendErr(merr *multierror.Error, errs ...error) *multierror.Error {
	merr = multierror.Append(merr, errs...)
	merr.ErrorFormat = func(errs []error) string {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return strings.Join(msgs, "; ")
	}
	return merr
}

// count is the number of errors in merr, which may be nil.
func count(merr *multierror.Error) int { return len(merr.WrappedErrors()) }
