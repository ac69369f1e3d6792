package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// MaxLimit is the largest semaphore the driver offers
// (Capabilities().MaxLimit). A semaphore of size N is N Redlock locks, and
// an attempt on a full one makes a round on each of them, so its cost grows
// with N: a few dozen parallel round trips at most.
const MaxLimit = 64

// slotSep separates a semaphore's key from a slot's index in the slot's
// key (Grant.Key). Keys that contain it are refused, so that a slot's key
// never names a lock.
const slotSep = "\x00"

// target is what one Redlock round acquires: the lock of a key, or one
// slot of a semaphore.
type target struct {
	key  string // the key the hold is known by: the lock's, or the slot's (Grant.Key)
	base string // the lock's or semaphore's key (Request.Key)
	slot int    // the slot's index; -1 for the lock
}

func lockTarget(key string) target { return target{key: key, base: key, slot: -1} }

func slotTarget(key string, slot int) target {
	return target{key: key + slotSep + strconv.Itoa(slot), base: key, slot: slot}
}

// checkKey refuses keys that could be mistaken for a slot's key.
func checkKey(key string) error {
	if strings.Contains(key, slotSep) {
		return backends.Invalid("key", "%q contains a NUL byte, which the redlock backend reserves for the keys of a semaphore's slots", key)
	}
	return nil
}

// parseKey returns the target of a key given to Refresh or Release: a
// slot's key, as Acquire returned it in Grant.Key, or a lock's key.
func parseKey(key string) (target, error) {
	base, idx, found := strings.Cut(key, slotSep)
	if !found {
		return lockTarget(key), nil
	}
	slot, err := strconv.Atoi(idx)
	if err != nil || base == "" || slot < 0 || slot >= MaxLimit || strconv.Itoa(slot) != idx {
		return target{}, backends.Invalid("key", "%q is neither a lock's key nor a semaphore slot's key (a NUL byte is reserved for these)", key)
	}
	return slotTarget(base, slot), nil
}

func (t target) acquire(ctx context.Context, n *node, req backends.Request) (backends.Grant, error) {
	if t.slot < 0 {
		return n.drv.AcquireSeeded(ctx, req, n.maxTTL/seedSteps)
	}
	return n.drv.AcquireSlot(ctx, req, t.slot, n.maxTTL/seedSteps)
}

func (t target) withdraw(ctx context.Context, n *node, token string) error {
	if t.slot < 0 {
		return n.drv.Withdraw(ctx, t.base, token)
	}
	return n.drv.WithdrawSlot(ctx, t.base, t.slot, token)
}

func (t target) release(ctx context.Context, n *node, token string) error {
	if t.slot < 0 {
		return n.drv.Release(ctx, t.base, token)
	}
	return n.drv.ReleaseSlot(ctx, t.base, t.slot, token)
}

func (t target) refresh(ctx context.Context, n *node, token string, ttl time.Duration) error {
	if t.slot < 0 {
		return n.drv.Refresh(ctx, t.base, token, ttl)
	}
	return n.drv.RefreshSlot(ctx, t.base, t.slot, token, ttl)
}

// acquireSlots makes one attempt on a semaphore of req.Limit slots: a full
// Redlock round on each slot in turn, from a random one, until one is won.
//
// Each slot is a lock of its own, voted on by every node, so two holders
// of one slot need two intersecting majorities, which cannot both be
// granted while one holds: the semaphore never admits more than req.Limit
// holders. A vote over one per-node set of holders would not have that
// property (see the package documentation).
func (d *Driver) acquireSlots(ctx context.Context, req backends.Request, nt time.Duration) (backends.Grant, error) {
	start := time.Now()
	first := rand.IntN(req.Limit)
	contended := true // every slot so far was held on a quorum of nodes
	var last error
	for i := range req.Limit {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return backends.Grant{}, fmt.Errorf("%w: %w", backends.ErrNotAcquired, err)
			}
			return backends.Grant{}, fmt.Errorf("%w: %w (last slot: %w)", backends.ErrNotAcquired, err, last)
		}
		if i > 0 && time.Since(start)+nt >= req.TTL {
			return backends.Grant{}, fmt.Errorf("%w: %q: %d of %d slots tried, no time left in the TTL of %v for another (last slot: %w)",
				backends.ErrNotAcquired, req.Key, i, req.Limit, req.TTL, last)
		}
		t := slotTarget(req.Key, (first+i)%req.Limit)
		g, refusal, err := d.acquireSlot(ctx, t, req, nt)
		if err == nil {
			return g, nil
		}
		if refusal == final {
			return backends.Grant{}, err
		}
		contended = contended && refusal == taken
		last = fmt.Errorf("slot %d: %w", t.slot, err)
	}
	if contended {
		return backends.Grant{}, backends.ErrNotAcquired // plain contention: the layer above words it
	}
	return backends.Grant{}, fmt.Errorf("%w: %q: none of its %d slots won (last slot: %w)", backends.ErrNotAcquired, req.Key, req.Limit, last)
}

// refusal says what a refused slot means for the semaphore's attempt.
type refusal int

const (
	final refusal = iota // the attempt ends: no quorum answered, ctx ended, another limit, the fencing round failed
	taken                // a quorum of nodes held the slot: try the next one
	split                // the vote split, or some nodes did not answer: try the next one
)

// acquireSlot makes one Redlock round on slot t; on a refusal it says
// whether another slot is worth a try.
func (d *Driver) acquireSlot(ctx context.Context, t target, req backends.Request, nt time.Duration) (backends.Grant, refusal, error) {
	r := d.round(ctx, t, req, nt)
	ok := len(r.granted) >= d.quorum
	var fence uint64
	if ok && req.Fence {
		var err error
		if fence, err = d.fence(ctx, r, req.Key, nt); err != nil {
			d.decide(r, false)
			d.withdrawAll(t, req.Token, nt)
			return backends.Grant{}, final, fmt.Errorf("%w: %w: %w", backends.ErrNotAcquired, ErrNoQuorum, err)
		}
	}
	d.decide(r, ok)
	if ok {
		g := r.result(fence, t.slot)
		g.Key = t.key
		return g, 0, nil
	}
	d.withdrawRound(r, nt)
	if holders := d.limitQuorum(r.refused); holders > 0 {
		return backends.Grant{}, final, backends.LimitMismatch(req.Key, req.Limit, holders)
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

// withdrawRound undoes a decided, failed round on the nodes that may hold
// its key (they granted it, or their outcome is unknown), in parallel, and
// waits for them: a node that refused outright holds nothing to withdraw,
// so a round on a full semaphore costs no second round trip. Nodes still
// in flight withdraw when their reply lands (see landed).
func (d *Driver) withdrawRound(r *round, nt time.Duration) {
	seen := r.seen
	// The votes that landed between collect and decide wait in the channel.
	for more := true; more; {
		select {
		case v := <-r.votes:
			seen = append(seen, v)
		default:
			more = false
		}
	}
	var wg sync.WaitGroup
	for _, v := range seen {
		if !v.mayHold {
			continue
		}
		wg.Add(1)
		started := d.spawn(func() {
			defer wg.Done()
			_ = r.h.t.withdraw(d.clock.Detached(context.Background(), nt), v.node, r.ref.token)
		})
		if !started {
			wg.Done() // closed: the hold expires on the node
		}
	}
	wg.Wait()
}
