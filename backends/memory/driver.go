package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Store holds the state the backend works on; backends sharing a
	// store see each other's holds. Default: a fresh private store on the
	// real clock. To use a ManualClock, build the store with NewStore.
	Store *Store
	// BackendOptions name the backend (default "memory"), set the
	// defaults of the primitives built on it and choose where its
	// telemetry goes.
	dsync.BackendOptions
}

// driver is the backends.Driver over a Store. It is safe for concurrent
// use. Every method returns at once: none blocks, sleeps or starts a
// goroutine.
//
// Each method returns ctx.Err() without acting if ctx is already done, and
// backends.ErrClosed after Close; bad arguments are reported first, as
// *backends.InvalidError values.
type driver struct {
	store *Store

	closed bool                       // guarded by Store.mu
	subs   map[*subscription]struct{} // open subscriptions; guarded by Store.mu
}

var _ backends.Driver = (*driver)(nil)

// caps never change; see Capabilities.
var caps = backends.Capabilities{
	ReleaseNotices: true,
	Name:           "memory",
	MaxLimit:       1 << 20,
	Fencing:        true,
	TTLResolution:  time.Millisecond,
	Order:          backends.BoundedBarging,
}

// New returns a backend on opts.Store (a fresh private store by default).
// Invalid opts.Defaults are an *dsync.InvalidError.
func New(opts *Options) (*dsync.Backend, error) {
	if opts == nil {
		opts = &Options{}
	}
	return dsync.NewBackend(newDriver(opts.Store), &opts.BackendOptions)
}

// newDriver returns a driver on s, or on a fresh private store if s is nil.
func newDriver(s *Store) *driver {
	if s == nil {
		s = NewStore(nil)
	}
	return &driver{store: s, subs: map[*subscription]struct{}{}}
}

// begin checks ctx and the driver, then locks the store and returns the
// current time. On success the caller must unlock the store.
func (d *driver) begin(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	d.store.mu.Lock()
	if d.closed {
		d.store.mu.Unlock()
		return time.Time{}, backends.ErrClosed
	}
	return d.store.clock.Now(), nil
}

// Acquire adds a hold on req.Key for req.TTL (kept at full precision) if the
// key has fewer than req.Limit live holds. It returns ErrNotAcquired when
// every slot is taken, and an *InvalidError when the key's live holds were
// acquired with a different limit; with ctx done, ErrNotAcquired wrapping
// ctx's error (the memory backend is never unavailable). When req.Fence is set, the key's fence
// counter is incremented and returned: it grows strictly over every hold of
// the key for the life of the store. The grant's TTL is req.TTL.
//
// A lock's waiters are served in order (backends.Request.Waiter): a
// refused waiter keeps its place for req.TTL, and a released lock is kept
// for the first live waiter for backends.HandOver, refusing every other
// attempt meanwhile; after that anybody may take it (bounded barging).
func (d *driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if err := backends.CheckRequest(req, caps); err != nil {
		return backends.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		// Not attempted: no contention, and no outage either.
		return backends.Grant{}, fmt.Errorf("%w: %w", backends.ErrNotAcquired, err)
	}
	limit := max(req.Limit, 1)
	now, err := d.begin(ctx)
	if err != nil {
		return backends.Grant{}, err
	}
	s := d.store
	defer s.mu.Unlock()
	s.maybeSweep(now)
	e := s.entry(req.Key, now)
	if len(e.holds) > 0 && e.limit != limit {
		return backends.Grant{}, backends.LimitMismatch(req.Key, limit, e.limit)
	}
	if limit == 1 {
		e.line.prune(now)
		refused := len(e.holds) > 0 || !e.line.admits(req.Waiter)
		if !refused && e.line.defers(req.Waiter, now) {
			refused = true
			e.notify() // the lock is kept for a waiter ahead: wake it
		}
		if refused {
			if req.Waiter != "" {
				e.line.join(req.Waiter, now, req.TTL)
			}
			return backends.Grant{}, backends.ErrNotAcquired
		}
		e.line.served(req.Waiter)
	}
	if len(e.holds) >= limit {
		return backends.Grant{}, backends.ErrNotAcquired
	}
	e.limit = limit
	g := backends.Grant{TTL: req.TTL}
	if req.Fence {
		e.fence++
		g.Fence = e.fence
	}
	e.holds = append(e.holds, hold{token: req.Token, value: slices.Clone(req.Value), expires: now.Add(req.TTL), fence: g.Fence})
	return g, nil
}

// Refresh sets the expiry of token's live hold on key to now + ttl. It
// returns ErrNotHeld, and changes nothing, when that hold has expired or never
// existed.
func (d *driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := checkKeyToken(key, token); err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, caps); err != nil {
		return err
	}
	now, err := d.begin(ctx)
	if err != nil {
		return err
	}
	defer d.store.mu.Unlock()
	e := d.store.lookup(key, now)
	if e == nil {
		return backends.ErrNotHeld
	}
	i := e.find(token)
	if i < 0 {
		return backends.ErrNotHeld
	}
	e.holds[i].expires = now.Add(ttl)
	return nil
}

// Release removes token's live hold on key and wakes the key's watchers. It
// returns ErrNotHeld, and touches no other hold, when that hold has expired
// or never existed.
func (d *driver) Release(ctx context.Context, key, token string) error {
	if err := checkKeyToken(key, token); err != nil {
		return err
	}
	now, err := d.begin(ctx)
	if err != nil {
		return err
	}
	s := d.store
	defer s.mu.Unlock()
	e := s.lookup(key, now)
	if e == nil {
		return backends.ErrNotHeld
	}
	i := e.find(token)
	if i < 0 {
		return backends.ErrNotHeld
	}
	e.holds = slices.Delete(e.holds, i, i+1)
	if e.limit == 1 {
		e.line.handOver(now)
	}
	e.notify()
	s.tidy(key, e)
	return nil
}

// Holder returns a copy of the value, the remaining time to live and the
// fencing token of the live hold on key that expires last, or ErrNotHeld
// if there is none.
func (d *driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if key == "" {
		return backends.HolderInfo{}, backends.Invalid("key", "empty")
	}
	now, err := d.begin(ctx)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	defer d.store.mu.Unlock()
	e := d.store.lookup(key, now)
	if e == nil || len(e.holds) == 0 {
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	last := slices.MaxFunc(e.holds, func(a, b hold) int { return a.expires.Compare(b.expires) })
	return backends.HolderInfo{Value: slices.Clone(last.value), TTL: last.expires.Sub(now), Fence: last.fence}, nil
}

// Capabilities reports name "memory", MaxLimit 1<<20, fencing, and a TTL
// resolution of 1 ms with no minimum TTL.
func (d *driver) Capabilities() backends.Capabilities { return caps }

// Close makes every later call on d return ErrClosed, closes d's release
// subscriptions after sending each one last notice (so that a waiter wakes
// and finds the driver closed), and leaves the store and its holds
// untouched. It is idempotent and always returns nil.
func (d *driver) Close() error {
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	for sub := range d.subs {
		backends.Deliver(sub.c, backends.Notice{})
		sub.unregister()
	}
	return nil
}

func checkKeyToken(key, token string) error {
	if key == "" {
		return backends.Invalid("key", "empty")
	}
	if token == "" {
		return backends.Invalid("token", "empty")
	}
	return nil
}

// Leave takes waiter out of key's line; a released lock kept for it goes
// to the next live waiter, and the key's watchers are woken.
func (d *driver) Leave(ctx context.Context, key, waiter string) error {
	if err := backends.CheckKey(key); err != nil {
		return err
	}
	if err := backends.CheckWaiter(waiter); err != nil {
		return err
	}
	now, err := d.begin(ctx)
	if err != nil {
		return err
	}
	s := d.store
	defer s.mu.Unlock()
	e := s.lookup(key, now)
	if e == nil {
		return nil
	}
	delete(e.line.places, waiter)
	if e.line.reserved == waiter && len(e.holds) == 0 {
		e.line.handOver(now)
		e.notify()
	}
	s.tidy(key, e)
	return nil
}
