package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// onGrant, when set (by tests), is told the voters of every hold won.
var onGrant func(key, token string, voters []int)

// holdRef names an attempt's hold: where it is, and its token (one token
// tries several slots of a semaphore, one after the other).
type holdRef struct {
	t     redisnode.Target
	token string
}

// hold tracks an attempt while some of its node requests are in flight, so
// that a hold applied after the attempt failed, or after the lease was
// released, is withdrawn from that node when its reply arrives. Its fields
// are protected by driver.mu.
type hold struct {
	pending int  // node requests in flight
	decided bool // the attempt has returned
	won     bool // it succeeded
	keep    bool // it succeeded and the lease is not released
	// inFlight marks the nodes whose request has not landed, by index
	// (New allows at most MaxNodes).
	inFlight uint64
	// landing, when a release waits for a node's request to land, is
	// closed (and cleared) at the next landing.
	landing chan struct{}
}

type vote struct {
	node    *node
	fence   uint64
	err     error
	applied bool // the node set the key, even if its vote does not count
	// mayHold: the node may hold the key: applied, or its request failed
	// with an outcome unknown.
	mayHold bool
}

// refusedOutright reports a node's answer that leaves nothing behind on it:
// the key was held, or held with another limit.
func refusedOutright(err error) bool {
	var le *redisnode.LimitError
	return errors.Is(err, backends.ErrNotAcquired) || errors.As(err, &le)
}

// refusal says what a refused round means for the attempt it is part of.
type refusal int

const (
	final refusal = iota // the attempt ends: no quorum answered, ctx ended, another limit, the fencing round failed
	taken                // a quorum of nodes held the target: a semaphore tries its next slot
	split                // the vote split, or some nodes did not answer: a semaphore tries its next slot
)

// Acquire makes one Redlock attempt (see attempt). For a lock (req.Limit
// at most 1) that is one round on the key's lock. For a semaphore
// (req.Limit above 1) it makes such a round on each of the semaphore's
// slots in turn, starting from a random one, and stops at the first slot
// won; Refresh and Release find that slot from the key and token. A slot
// refused by a quorum is withdrawn before the next slot is tried, so a
// failed Acquire leaves nothing behind. It fails with ErrNotAcquired when
// every slot is refused, at once with an error matching ErrNoQuorum when
// fewer than a quorum of nodes answer, and with the error of
// backends.LimitMismatch when a quorum of nodes hold the key with another
// limit (1: its lock). A refusal that the nodes which did not answer could
// have turned into a grant (see notAcquired) matches
// dsync.ErrUnavailable: the backend could not decide.
func (d *driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, d.caps); err != nil {
		return backends.Grant{}, err
	}
	nt, err := d.timeoutFor(req.TTL)
	if err != nil {
		return backends.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return backends.Grant{}, fmt.Errorf("%w: %w", backends.ErrNotAcquired, err)
	}
	if req.Limit > 1 {
		return d.acquireSlots(ctx, req, nt)
	}
	g, why, err := d.attempt(ctx, redisnode.Target{Key: req.Key}, req, nt)
	if err != nil && why == taken {
		// A quorum of nodes held the lock: plain contention, which the SPI
		// reports as the bare sentinel (the layer above words it).
		return backends.Grant{}, backends.ErrNotAcquired
	}
	return g, err
}

// attempt makes one Redlock round on t (a lock, or one slot of a
// semaphore): the parallel fan-out decided at quorum, then, if req.Fence
// and fewer than a quorum of the voters drew the token, the write-back
// round of the fencing token. A failed round is withdrawn (see
// withdrawRound); on a refusal, attempt says whether another slot is worth
// a try.
func (d *driver) attempt(ctx context.Context, t redisnode.Target, req backends.Request, nt time.Duration) (backends.Grant, refusal, error) {
	r := d.round(ctx, holdRef{t, req.Token}, req, nt)
	ok := len(r.granted) >= d.quorum
	var fence uint64
	if ok && req.Fence {
		var err error
		if fence, err = d.fence(ctx, r, nt); err != nil {
			d.decide(r, false)
			d.withdrawRound(r, nt, true)
			return backends.Grant{}, final, fmt.Errorf("%w: %w: %w", backends.ErrNotAcquired, ErrNoQuorum, err)
		}
	}
	var holders, refusals int
	if !ok {
		holders, refusals = d.limitQuorum(r.refused), d.finalRefusals(r.refused)
		if holders > 0 || refusals > len(d.nodes)-d.quorum {
			// The attempt's error is final: its waiter, if any, is done
			// (set before decide, which hands r.req to the stragglers).
			r.req.Waiter = ""
		}
	}
	d.decide(r, ok)
	if ok {
		d.leaveRefused(r)
		d.won.add(req.Key, req.Token, t, req.TTL)
		if onGrant != nil {
			onGrant(req.Key, req.Token, r.voters())
		}
		return r.grant(fence, req.TTL), 0, nil
	}
	// A lock is withdrawn from every node, to the letter of the
	// specification; a semaphore's slot only where it may be held, so that
	// a taken slot costs one round trip, not two.
	d.withdrawRound(r, nt, t.Slots == 0)
	if holders > 0 {
		return backends.Grant{}, final, backends.LimitMismatch(req.Key, max(req.Limit, 1), holders)
	}
	if n := refusals; n > len(d.nodes)-d.quorum {
		// Enough nodes refuse for good that no quorum can form.
		return backends.Grant{}, final, fmt.Errorf("%w: %d of %d nodes refused the request for good: %w",
			backends.Invalid("request", "no quorum can grant it"), n, len(d.nodes), r.refused.ErrorOrNil())
	}
	err := d.notAcquired(ctx, len(r.granted), r.refused)
	if ctx.Err() != nil || errors.Is(err, ErrNoQuorum) {
		return backends.Grant{}, final, err
	}
	held := 0
	for _, e := range r.refused.WrappedErrors() {
		if errors.Is(e, backends.ErrNotAcquired) {
			held++
		}
	}
	if held >= d.quorum {
		return backends.Grant{}, taken, err
	}
	return backends.Grant{}, split, err
}

// round is one Redlock attempt on one target: its requests, sent to every
// node whose vote counts (see voting), and the votes collected until it
// was decided.
type round struct {
	ref     holdRef
	req     redisnode.Hold // what it asks every node for
	h       *hold
	votes   chan vote // buffered for every node
	seen    []vote    // the votes collected
	granted []vote
	refused *multierror.Error
}

// seedSteps: a node seeds a missing fence counter from its clock rounded
// down to MaxTTL/seedSteps, so that nodes seeding a counter in the same
// round nearly always start it equal, and the round needs no write-back;
// the guarantee then asks the nodes' clocks to agree to within 7/8 of
// MaxTTL rather than all of it.
const seedSteps = 8

// round sends req for ref to every node whose vote counts, in parallel, and
// collects votes until quorum is reached or out of reach, the per-node
// timeout passes, or ctx ends. The caller must decide the round.
func (d *driver) round(ctx context.Context, ref holdRef, req backends.Request, nt time.Duration) *round {
	start := time.Now()
	h := redisnode.Hold{Token: req.Token, Value: req.Value, TTL: req.TTL, Fence: req.Fence, SeedStep: d.maxTTL / seedSteps}
	if ref.t.Slots == 0 {
		h.Waiter = req.Waiter // a slot keeps no line
	}
	r := &round{ref: ref, req: h, h: &hold{}, votes: make(chan vote, len(d.nodes))}
	for _, n := range d.nodes {
		if err := n.excluded(start); err != nil {
			r.votes <- vote{node: n, err: err}
			continue
		}
		d.mu.Lock()
		if r.h.pending == 0 {
			d.inFlight[ref] = r.h
		}
		r.h.pending++
		r.h.inFlight |= 1 << n.index
		d.mu.Unlock()
		// A reply later than the TTL is moot: the key has expired by then.
		nctx, cancel := d.nodeCtx(req.TTL)
		started := d.spawn(func() {
			nctx, call := d.tel.Start(ctx, nctx, n.index, telemetry.NodeAcquire)
			fence, err := n.node.Acquire(nctx, ref.t, h)
			call.End(nctx, err)
			cancel()
			err = redisnode.Refusal(err)
			v := vote{node: n, fence: fence, err: err, applied: err == nil, mayHold: err == nil || !refusedOutright(err)}
			if err == nil {
				// A request that found its connection broken by a restart,
				// or that was the node's first, ran on a new connection,
				// whose hook has only now learned the server's uptime and
				// run_id: the check made before sending it was about the
				// previous process, or about none.
				if qerr := n.excluded(time.Now()); qerr != nil {
					v.err = qerr
				}
			}
			d.landed(r, v)
		})
		if !started {
			d.landed(r, vote{node: n, err: backends.ErrClosed})
			cancel()
		}
	}
	r.seen, r.granted, r.refused = d.collect(ctx, r.votes, start.Add(nt))
	return r
}

// collect gathers votes until quorum is reached or out of reach, the
// per-node deadline passes, or ctx ends. A node that has not voted by then
// counts as a refusal.
func (d *driver) collect(ctx context.Context, votes <-chan vote, deadline time.Time) (seen, granted []vote, refused *multierror.Error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	answered := make([]bool, len(d.nodes))
	n := len(d.nodes)
	for len(granted) < d.quorum && count(refused) <= n-d.quorum && len(granted)+count(refused) < n {
		select {
		case v := <-votes:
			seen = append(seen, v)
			answered[v.node.index] = true
			if v.err == nil {
				granted = append(granted, v)
			} else {
				refused = appendErr(refused, &NodeError{Index: v.node.index, Addr: v.node.addr, Err: v.err})
			}
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		for i, a := range answered {
			if !a {
				err := ctx.Err()
				if err == nil {
					err = fmt.Errorf("no answer within the per-node timeout: %w", context.DeadlineExceeded)
				}
				refused = appendErr(refused, &NodeError{Index: i, Addr: d.nodes[i].addr, Err: err})
			}
		}
		break
	}
	return seen, granted, refused
}

// landed delivers a node's vote, or, once the round has been decided,
// withdraws a late hold that nobody will release otherwise.
func (d *driver) landed(r *round, v vote) {
	d.mu.Lock()
	h := r.h
	h.pending--
	h.inFlight &^= 1 << v.node.index
	if h.pending == 0 {
		delete(d.inFlight, r.ref)
	}
	if h.landing != nil {
		close(h.landing)
		h.landing = nil
	}
	if !h.decided {
		// Sent under mu, so that once the round is decided its every
		// vote is either in the channel or withdrawn here.
		r.votes <- v // buffered for every node: never blocks
		d.mu.Unlock()
		return
	}
	keep, won := h.keep, h.won
	d.mu.Unlock()
	switch {
	case v.applied && !keep:
		h := r.req
		if won {
			h.Waiter = "" // released: its waiter is not waiting any more
		}
		d.withdraw(r.ref.t, h, v.node, maxNodeTimeout)
	case won && r.req.Waiter != "" && errors.Is(v.err, backends.ErrNotAcquired):
		d.leave(r.ref.t.Key, r.req.Waiter, v.node)
	}
}

// decide records a round's outcome for its stragglers.
func (d *driver) decide(r *round, ok bool) {
	d.mu.Lock()
	r.h.decided, r.h.won, r.h.keep = true, ok, ok
	d.mu.Unlock()
}

// withdrawRound undoes a decided, failed round, in parallel, and waits for
// the nodes: on every node when all is set (the specification's step 5,
// even the nodes it believes it could not lock), else on the nodes that
// may hold it (they granted it, or their outcome is unknown: a node that
// refused outright answered that it holds nothing of this token). Nodes
// still in flight withdraw when their reply lands (see landed).
func (d *driver) withdrawRound(r *round, nt time.Duration, all bool) {
	var mayHold uint64 // by node index
	for _, v := range r.decided() {
		if v.mayHold {
			mayHold |= 1 << v.node.index
		}
	}
	sel := everyServer
	if !all {
		sel = func(n *node, _ time.Time) error {
			if mayHold&(1<<n.index) == 0 {
				return errNothingHeld
			}
			return nil
		}
	}
	d.fanOut(d.ctx, nt, sel, telemetry.NodeWithdraw, func(ctx context.Context, n *node) error {
		return n.node.Withdraw(ctx, r.ref.t, r.req)
	})
}

// decided returns the votes of a decided round: those collected, and
// those that landed between collect and decide, which wait in the channel.
func (r *round) decided() []vote {
	for {
		select {
		case v := <-r.votes:
			r.seen = append(r.seen, v)
		default:
			return r.seen
		}
	}
}

// leaveRefused takes the waiter of a round won, if any, out of the lines
// of the nodes that refused it (the lock was held there, or kept for
// another waiter), in the background, so that no node keeps the lock for
// it later; a node that refuses after the round was decided does the same
// when its vote lands (see landed).
func (d *driver) leaveRefused(r *round) {
	if r.req.Waiter == "" {
		return
	}
	for _, v := range r.decided() {
		if errors.Is(v.err, backends.ErrNotAcquired) {
			d.spawn(func() { d.leave(r.ref.t.Key, r.req.Waiter, v.node) })
		}
	}
}

// leave takes waiter out of key's line on one node, silently.
func (d *driver) leave(key, waiter string, n *node) {
	ctx, cancel := d.nodeCtx(maxNodeTimeout)
	defer cancel()
	ctx, call := d.tel.Start(context.Background(), ctx, n.index, telemetry.NodeWithdraw)
	call.End(ctx, n.node.Leave(ctx, key, waiter))
}

// errNothingHeld: the node refused the round outright.
var errNothingHeld = errors.New("nothing to withdraw")

// withdraw undoes attempt h on t on one node, silently, within timeout.
func (d *driver) withdraw(t redisnode.Target, h redisnode.Hold, n *node, timeout time.Duration) {
	ctx, cancel := d.nodeCtx(timeout)
	defer cancel()
	ctx, call := d.tel.Start(context.Background(), ctx, n.index, telemetry.NodeWithdraw)
	call.End(ctx, n.node.Withdraw(ctx, t, h))
}

// fence returns the fencing counter of a won round: the largest among its
// voters. Unless a quorum of them drew that very counter, it is written
// back first, so that every later quorum meets a node holding it; when
// they did, those nodes hold it already. Either way the voters' holds
// record it (the write-back sets it in each hold it finds), so that a
// quorum of the nodes holding the lock agree on its token (see Holder).
func (d *driver) fence(ctx context.Context, r *round, nt time.Duration) (uint64, error) {
	var fence uint64
	drew := 0 // voters whose counter is fence
	for _, v := range r.granted {
		switch {
		case v.fence > fence:
			fence, drew = v.fence, 1
		case v.fence == fence:
			drew++
		}
	}
	if drew >= d.quorum {
		return fence, nil
	}
	acks, errs := d.fanOut(ctx, nt, voting, telemetry.NodeFence, func(ctx context.Context, n *node) error {
		return n.node.RaiseFence(ctx, r.ref.t, r.ref.token, fence)
	})
	if acks < d.quorum {
		return 0, fmt.Errorf("fencing token write-back acknowledged by %d of %d nodes, %d needed: %w", acks, len(d.nodes), d.quorum, errs.ErrorOrNil())
	}
	return fence, nil
}

// voters lists the indexes of the nodes that granted a round, in order.
func (r *round) voters() []int {
	out := make([]int, 0, len(r.granted))
	for _, v := range r.granted {
		out = append(out, v.node.index)
	}
	slices.Sort(out)
	return out
}

// notAcquired is the error of a round lost with granted votes. It is
// contention (ErrNotAcquired alone) when the nodes that refused outright
// (the key held, or kept for another waiter) are so many that no quorum
// could have formed whatever the others did. Otherwise the round was
// undecided, and the error matches backends.ErrUnavailable: the nodes
// that did not grant it without refusing outright (down, slow, cut off,
// quarantined, or not heard from because the round was decided early)
// could have made the quorum; ErrNoQuorum when fewer than a quorum
// answered; and a round cut short by ctx (one decided by refusals ends
// before that).
func (d *driver) notAcquired(ctx context.Context, granted int, refused *multierror.Error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w: %w: %w", backends.ErrNotAcquired, backends.ErrUnavailable, err, refused.ErrorOrNil())
	}
	silent, outright := 0, 0
	for _, e := range refused.WrappedErrors() {
		if refusedOutright(e) {
			outright++
		} else {
			silent++
		}
	}
	switch {
	case silent > len(d.nodes)-d.quorum:
		return fmt.Errorf("%w: %w: %d of %d nodes answered, %d needed: %w",
			backends.ErrNotAcquired, ErrNoQuorum, len(d.nodes)-silent, len(d.nodes), d.quorum, refused.ErrorOrNil())
	case outright <= len(d.nodes)-d.quorum:
		return fmt.Errorf("%w: %w: %d of %d nodes granted, %d needed, %d refused, the others did not answer: %w",
			backends.ErrNotAcquired, backends.ErrUnavailable, granted, len(d.nodes), d.quorum, outright, refused.ErrorOrNil())
	}
	return fmt.Errorf("%w: %d of %d nodes granted, %d needed: %w", backends.ErrNotAcquired, granted, len(d.nodes), d.quorum, refused.ErrorOrNil())
}

// finalRefusals counts the nodes in errs that refused for good
// (redisnode.Refusal: no permission, a key of another type).
func (d *driver) finalRefusals(errs *multierror.Error) int {
	n := 0
	for _, e := range errs.WrappedErrors() {
		if errors.Is(e, backends.ErrInvalid) {
			n++
		}
	}
	return n
}

// limitQuorum returns the most common limit among the *redisnode.LimitError
// refusals in errs when there are at least a quorum of them, else 0.
func (d *driver) limitQuorum(errs *multierror.Error) int {
	limits := map[int]int{}
	total, best := 0, 0
	for _, e := range errs.WrappedErrors() {
		var le *redisnode.LimitError
		if errors.As(e, &le) {
			total++
			limits[le.Holders]++
			if limits[le.Holders] > limits[best] || limits[le.Holders] == limits[best] && le.Holders < best {
				best = le.Holders
			}
		}
	}
	if total < d.quorum {
		return 0
	}
	return best
}
