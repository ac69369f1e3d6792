package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
)

// MaxLimit is the largest semaphore the driver offers
// (Capabilities().MaxLimit): redisnode.MaxSlots.
const MaxLimit = redisnode.MaxSlots

// acquireSlots makes one attempt on a semaphore of req.Limit slots: a full
// Redlock round on each slot in turn, from a random one, until one is won.
//
// Each slot is a lock of its own, voted on by every node, so two holders
// of one slot need two intersecting majorities, which cannot both be
// granted while one holds: the semaphore never admits more than req.Limit
// holders (see docs/redlock.md).
func (d *driver) acquireSlots(ctx context.Context, req backends.Request, nt time.Duration) (backends.Grant, error) {
	start := time.Now()
	first := rand.IntN(req.Limit)
	contended := true  // every slot so far was held on a quorum of nodes
	undecided := false // some slot's round was undecided (backends.ErrUnavailable)
	var last error
	for i := range req.Limit {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return backends.Grant{}, fmt.Errorf("%w: %w", backends.ErrNotAcquired, err)
			}
			return backends.Grant{}, fmt.Errorf("%w: %w (last slot: %w)", backends.ErrNotAcquired, err, last)
		}
		if i > 0 && time.Since(start)+nt >= req.TTL {
			// The slots not tried are undecided.
			return backends.Grant{}, fmt.Errorf("%w: %w: %q: %d of %d slots tried, no time left in the TTL of %v for another (last slot: %w)",
				backends.ErrNotAcquired, backends.ErrUnavailable, req.Key, i, req.Limit, req.TTL, last)
		}
		t := redisnode.Target{Key: req.Key, Slot: (first + i) % req.Limit, Slots: req.Limit}
		g, refusal, err := d.attempt(ctx, t, req, nt)
		if err == nil {
			return g, nil
		}
		if refusal == final {
			return backends.Grant{}, err
		}
		contended = contended && refusal == taken
		undecided = undecided || errors.Is(err, backends.ErrUnavailable)
		last = fmt.Errorf("slot %d: %w", t.Slot, err)
	}
	switch {
	case contended:
		return backends.Grant{}, backends.ErrNotAcquired // plain contention: the layer above words it
	case undecided:
		return backends.Grant{}, fmt.Errorf("%w: %w: %q: none of its %d slots won, some undecided (last slot: %w)", backends.ErrNotAcquired, backends.ErrUnavailable, req.Key, req.Limit, last)
	}
	return backends.Grant{}, fmt.Errorf("%w: %q: none of its %d slots won (last slot: %w)", backends.ErrNotAcquired, req.Key, req.Limit, last)
}

// grant is the grant of a won round, whose voters' largest counter is
// fence (see fenceToken).
func (r *round) grant(fence uint64, ttl time.Duration) backends.Grant {
	return backends.Grant{Fence: fenceToken(fence, r.ref.t.Slot), TTL: ttl.Truncate(time.Millisecond)}
}

// fenceToken is the fencing token of a hold of slot (0 for a lock) whose
// counter is c: c*MaxLimit + slot. Permits won at the same time on
// different slots may draw the same counter (each takes the largest among
// its own voters), and the slot tells them apart, while a later counter
// still means a larger token (slot < MaxLimit). Zero for no counter.
func fenceToken(c uint64, slot int) uint64 {
	if c == 0 {
		return 0
	}
	return c*MaxLimit + uint64(slot)
}

// wonHolds remembers where each hold won and not released is, by key and
// token, so that Refresh and Release, which the layer above calls with the
// key it asked for, find a semaphore's slot. An entry goes on Release, or
// once its hold has surely expired on every node (swept as the map grows),
// so that leases lost without a Release do not pile up.
type wonHolds struct {
	mu      sync.Mutex // protects the fields below
	m       map[wonKey]wonHold
	sweepAt int // sweep expired entries when the map reaches this size
}

type wonKey struct{ key, token string }

type wonHold struct {
	t       redisnode.Target
	expires time.Time // no node holds it after this
}

const minSweep = 64

func (w *wonHolds) init() { w.m, w.sweepAt = map[wonKey]wonHold{}, minSweep }

// add records (or, after a refresh, renews) the hold of token at t, which
// no node keeps longer than ttl from now.
func (w *wonHolds) add(key, token string, t redisnode.Target, ttl time.Duration) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m[wonKey{key, token}] = wonHold{t: t, expires: now.Add(ttl)}
	if len(w.m) < w.sweepAt {
		return
	}
	for k, h := range w.m {
		if now.After(h.expires) {
			delete(w.m, k)
		}
	}
	w.sweepAt = max(2*len(w.m), minSweep)
}

// find returns where token's hold of key is: the slot it won, or key's
// lock when it is not known.
func (w *wonHolds) find(key, token string) redisnode.Target {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.m[wonKey{key, token}]; ok {
		return h.t
	}
	return redisnode.Target{Key: key}
}

func (w *wonHolds) remove(key, token string) {
	w.mu.Lock()
	delete(w.m, wonKey{key, token})
	w.mu.Unlock()
}
