package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// heldTarget checks a Release or Refresh of (key, token), before any I/O,
// and returns where its hold is: the slot it won, or key's lock.
func (d *driver) heldTarget(key, token string) (redisnode.Target, error) {
	if d.closed.Load() {
		return redisnode.Target{}, backends.ErrClosed
	}
	if key == "" || token == "" {
		return redisnode.Target{}, backends.Invalid("key or token", "empty")
	}
	return d.won.find(key, token), nil
}

// Release deletes the hold on every node in parallel (quarantined ones
// included; an alias's server is its original's), each bounded by the per-node timeout, and tells stragglers of
// its acquisition to release their node when their reply arrives. It
// returns nil when a quorum deleted it, ErrNotHeld when it was gone from
// more nodes than a quorum tolerates, and the nodes' errors otherwise. For
// a semaphore, key is the semaphore's: the driver knows the permit's slot,
// and its release wakes the semaphore's waiters.
func (d *driver) Release(ctx context.Context, key, token string) error {
	t, err := d.heldTarget(key, token)
	if err != nil {
		return err
	}
	d.won.remove(key, token)
	d.mu.Lock()
	h := d.inFlight[holdRef{t, token}]
	d.mu.Unlock()
	nt, _ := d.timeoutFor(d.maxTTL)
	return d.quorumResult("release", d.fanOutCounted(ctx, nt, everyServer, telemetry.NodeRelease, func(ctx context.Context, n *node) error {
		if h != nil {
			if !d.awaitLanding(ctx, h, n.index) {
				return fmt.Errorf("the acquisition's request was still in flight: %w", cmp.Or(ctx.Err(), context.DeadlineExceeded))
			}
			// The release gets a per-node timeout of its own after the wait.
			var cancel context.CancelFunc
			ctx, cancel = d.nodeCtx(nt)
			defer cancel()
		}
		return n.node.Release(ctx, t, token, true)
	}))
}

// awaitLanding waits until node i's acquisition request of h has landed
// (or was never sent), so that the release sent next cannot reach the node
// before the key it deletes; it reports whether it landed before ctx
// ended. If not, the request withdraws its key itself when it lands.
// Waiting keeps to one command per node and step: without it the release
// and the straggler's withdrawal both go out.
func (d *driver) awaitLanding(ctx context.Context, h *hold, i int) bool {
	for {
		d.mu.Lock()
		if h.inFlight&(1<<i) == 0 {
			d.mu.Unlock()
			return true
		}
		if h.landing == nil {
			h.landing = make(chan struct{})
		}
		landing := h.landing
		d.mu.Unlock()
		select {
		case <-landing:
		case <-ctx.Done():
			d.mu.Lock()
			landed := h.inFlight&(1<<i) == 0
			if !landed {
				h.keep = false
			}
			d.mu.Unlock()
			return landed
		}
	}
}

// Refresh resets the hold's TTL on every node whose vote counts (neither
// quarantined nor an alias), in parallel; it succeeds when a quorum refreshed it. A hold gone from more
// nodes than a quorum tolerates is ErrNotHeld; expired keys are never
// re-created. For a semaphore, key is the semaphore's.
func (d *driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	t, err := d.heldTarget(key, token)
	if err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return err
	}
	nt, err := d.timeoutFor(ttl)
	if err != nil {
		return err
	}
	err = d.quorumResult("refresh", d.fanOutCounted(ctx, nt, voting, telemetry.NodeRefresh, func(ctx context.Context, n *node) error {
		return n.node.Refresh(ctx, t, token, ttl)
	}))
	if err == nil {
		d.won.add(key, token, t, ttl)
	}
	return err
}

type counted struct {
	ok, notHeld int
	errs        *multierror.Error
}

func (d *driver) fanOutCounted(ctx context.Context, nt time.Duration, sel selector, what telemetry.NodeOp, op func(context.Context, *node) error) counted {
	ok, errs := d.fanOut(ctx, nt, sel, what, op)
	c := counted{ok: ok, errs: errs}
	for _, e := range errs.WrappedErrors() {
		if errors.Is(e, backends.ErrNotHeld) {
			c.notHeld++
		}
	}
	return c
}

func (d *driver) quorumResult(op string, c counted) error {
	n := len(d.nodes)
	switch {
	case c.ok >= d.quorum:
		return nil
	case c.notHeld > n-d.quorum:
		return fmt.Errorf("%w: %s: gone from %d of %d nodes: %w", backends.ErrNotHeld, op, c.notHeld, n, c.errs.ErrorOrNil())
	default:
		return fmt.Errorf("dsync: redlock: %s reached %d of %d nodes, %d needed: %w", op, c.ok, n, d.quorum, c.errs.ErrorOrNil())
	}
}

// Holder reports the holder of key that a quorum of nodes agrees on (the
// same token in the same place: the lock, or one slot of a semaphore), with
// the smallest TTL among those nodes; of several such holders of a
// semaphore, the one whose hold expires last. Its Fence is the lease's
// token (fenceToken) of the counter that a quorum of nodes record with the
// hold: the voters of the round that won it all do (see fence), and a
// node that granted it after the round was decided may record another.
// When the nodes that answer make no quorum on one counter (voters that
// did not answer), it is the largest they record. It returns ErrNotHeld when no hold has a quorum.
// It reads every node whose vote counts in one parallel round.
func (d *driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	if key == "" {
		return backends.HolderInfo{}, backends.Invalid("key", "empty")
	}
	nt, _ := d.timeoutFor(d.maxTTL)
	holds, _, errs := fanOutValues(d, ctx, nt, voting, telemetry.NodeHolder, func(ctx context.Context, n *node) ([]redisnode.Held, error) {
		return n.node.Holds(ctx, key)
	})
	type agg struct {
		votes  int
		slot   int // the hold's slot (0 for a lock), for its grant's token
		info   backends.HolderInfo
		fences map[uint64]int // nodes by the counter they record
	}
	byPlace := map[holdRef]*agg{}
	for _, hs := range holds {
		for _, h := range hs {
			p := holdRef{h.Target, h.Token}
			a := byPlace[p]
			if a == nil {
				a = &agg{slot: h.Target.Slot, info: backends.HolderInfo{Value: h.Value, TTL: h.TTL}, fences: map[uint64]int{}}
				byPlace[p] = a
			}
			a.votes++
			a.info.TTL = min(a.info.TTL, h.TTL)
			a.fences[h.Fence]++
		}
	}
	var best *agg
	for _, a := range byPlace {
		if a.votes >= d.quorum && (best == nil || a.info.TTL > best.info.TTL) {
			best = a
		}
	}
	if best != nil {
		var counter uint64
		for c, n := range best.fences {
			if n >= d.quorum {
				counter = c
				break
			}
			counter = max(counter, c)
		}
		best.info.Fence = fenceToken(counter, best.slot)
		return best.info, nil
	}
	if count(errs) > len(d.nodes)-d.quorum {
		return backends.HolderInfo{}, fmt.Errorf("%w: holder: %w", ErrNoQuorum, errs.ErrorOrNil())
	}
	return backends.HolderInfo{}, backends.ErrNotHeld
}

// Leave takes waiter out of key's line on every node in parallel
// (quarantined ones included, as Release), each bounded by the per-node
// timeout; a node that kept the lock for waiter keeps it for its next live
// waiter (or frees it) and tells its waiters. It returns nil when a quorum
// of nodes answered, and the nodes' errors otherwise: a place left behind
// lapses on its own.
func (d *driver) Leave(ctx context.Context, key, waiter string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	if key == "" || waiter == "" {
		return backends.Invalid("key or waiter", "empty")
	}
	if err := backends.CheckWaiter(waiter); err != nil {
		return err
	}
	nt, _ := d.timeoutFor(d.maxTTL)
	ok, errs := d.fanOut(ctx, nt, everyServer, telemetry.NodeWithdraw, func(ctx context.Context, n *node) error {
		return n.node.Leave(ctx, key, waiter)
	})
	if ok < d.quorum {
		return fmt.Errorf("dsync: redlock: leave reached %d of %d nodes, %d needed: %w", ok, len(d.nodes), d.quorum, errs.ErrorOrNil())
	}
	return nil
}
