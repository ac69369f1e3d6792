package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
)

// lockTTL is every lock's TTL: dsync's default, which the Redlock masters'
// max_ttl allows.
const lockTTL = 10 * time.Second

// Groups: the servers a target runs on. Ratios compare targets of one group.
const (
	groupRedis   = "Redis, 1 instance"
	groupRedlock = "Redlock, 5 instances"
	groupEtcd    = "etcd, 1 member"
)

// Roles of a target.
const (
	roleDsync       = "dsync"
	rolePeer        = "peer"
	roleFloor       = "floor"
	roleFencedFloor = "fenced floor"
)

// variantTry and variantTryNoFence are dsync's one-attempt variants
// (TryAcquire): on a free key they show what Acquire's blocking machinery
// costs; without fencing, the lock path alone, doing what the floor does.
const (
	variantTry        = "TryAcquire"
	variantTryNoFence = "TryAcquire, no fencing"
)

// errGaveUp marks a blocking lock call that returned because the library's
// own retry policy gave up (redsync's 32 tries); the contention runner asks
// again and counts it.
var errGaveUp = errors.New("the library's retry policy gave up")

// target is one library, or a raw floor, in one configuration.
type target struct {
	name    string // "dsync", "redsync", "raw SET NX PX + compare-and-delete", ...
	variant string // "" for shipped defaults; "1 ms retry", "no fencing", "8 clients", ...
	group   string
	role    string
	// cycles: whether the target runs in the uncontended and throughput
	// scenarios; contended: in the contention scenario (the floors cannot
	// wait for a lock).
	cycles, contended bool
	// newWorker returns the handle of one goroutine. Handles are created
	// before a slice's clock starts and reused across slices.
	newWorker func(ctx context.Context) (worker, error)

	mu      sync.Mutex // protects workers
	workers []worker
}

// label is the target's row label.
func (t *target) label() string {
	if t.variant == "" {
		return t.name
	}
	return t.name + " (" + t.variant + ")"
}

// id is the target's stable identifier in the JSON output.
func (t *target) id() string { return t.group + " / " + t.label() }

// workerSet returns n handles, creating those not made yet.
func (t *target) workerSet(ctx context.Context, n int) ([]worker, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.workers) < n {
		w, err := t.newWorker(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.id(), err)
		}
		t.workers = append(t.workers, w)
	}
	return t.workers[:n], nil
}

func (t *target) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.workers {
		w.close()
	}
	t.workers = nil
}

// worker is one goroutine's handle on a library. lock blocks, with the
// library's retry policy, until it holds key or ctx ends; it returns the
// function that unlocks. Not safe for concurrent use.
type worker interface {
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	close()
}

// token returns a fresh unguessable lock value, as every library draws one.
func token() string { return rand.Text() }

// dsyncWorker locks through dsync's locker, on a backend shared by every
// worker of its target (goroutines of one process) or owned by this worker
// (a separate client, as a separate process would have).
type dsyncWorker struct {
	b     *dsync.Backend
	owned bool
	opts  *locker.Options
	try   bool // one attempt (TryAcquire) instead of Acquire
	key   string
	l     *locker.Locker
}

func (w *dsyncWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	if w.l == nil || w.key != key {
		l, err := locker.New(w.b, key, w.opts) // no I/O
		if err != nil {
			return nil, err
		}
		w.l, w.key = l, key
	}
	acquire := w.l.Acquire
	if w.try {
		acquire = w.l.TryAcquire
	}
	lease, err := acquire(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

func (w *dsyncWorker) close() {
	if w.owned {
		_ = w.b.Close()
	}
}

// dsyncTarget measures dsync on b (shared by the workers), or, with url
// set, on a backend of each worker's own opened from url.
func dsyncTarget(group, variant string, b *dsync.Backend, url string, opts *locker.Options) *target {
	return &target{
		name: "dsync", variant: variant, group: group, role: roleDsync,
		newWorker: func(ctx context.Context) (worker, error) {
			if url == "" {
				return &dsyncWorker{b: b, opts: opts, try: variant == variantTry || variant == variantTryNoFence}, nil
			}
			own, err := dsync.Open(ctx, url)
			if err != nil {
				return nil, err
			}
			if err := waitQuarantine(ctx, own); err != nil {
				_ = own.Close()
				return nil, err
			}
			return &dsyncWorker{b: own, owned: true, opts: opts}, nil
		},
	}
}

// rawRelease is the Redlock specification's compare-and-delete.
var rawRelease = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
else
	return 0
end`)

// rawFencedAcquire is SET NX PX and, when it succeeds, INCR of a counter,
// in one script: the least a lock with a fencing token asks of a server.
// The fenced floor keeps one counter (rawFenceCounter) for every key, so
// that a fresh key creates no counter.
var rawFencedAcquire = goredis.NewScript(`if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 0
end
return redis.call("INCR", KEYS[2])`)

const rawFenceCounter = "raw:fence"

// rawWorker is the floor: the least a correct lock must do with go-redis,
// SET key token NX PX ttl on every client in parallel (one goroutine per
// client beyond the first, waiting for every reply, as the Redlock
// specification's multiplexing does), then the compare-and-delete script
// likewise. It makes one attempt: the floor has no retry policy.
//
// The fenced floor acquires with rawFencedAcquire instead, and its token is
// the largest counter of the replies. One goroutine's cycles reach every
// node in the same order, so the nodes' counters agree, and it never makes
// the write-back a Redlock client needs when they do not (nor does dsync
// there).
type rawWorker struct {
	clients []*goredis.Client
	fenced  bool
	errs    []error
}

func (w *rawWorker) each(f func(c *goredis.Client) error) int {
	if len(w.clients) == 1 {
		w.errs[0] = f(w.clients[0])
	} else {
		var wg sync.WaitGroup
		for i, c := range w.clients {
			wg.Go(func() { w.errs[i] = f(c) })
		}
		wg.Wait()
	}
	ok := 0
	for _, err := range w.errs {
		if err == nil {
			ok++
		}
	}
	return ok
}

func (w *rawWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	tok := token()
	var set func(c *goredis.Client) error
	if w.fenced {
		keys := []string{key, rawFenceCounter}
		set = func(c *goredis.Client) error {
			n, err := rawFencedAcquire.Run(ctx, c, keys, tok, lockTTL.Milliseconds()).Int64()
			if err == nil && n == 0 {
				err = errors.New("SET NX refused")
			}
			return err
		}
	} else {
		set = func(c *goredis.Client) error {
			ok, err := c.SetNX(ctx, key, tok, lockTTL).Result()
			if err == nil && !ok {
				err = errors.New("SET NX refused")
			}
			return err
		}
	}
	granted := w.each(set)
	unlock := func(ctx context.Context) error {
		if w.each(func(c *goredis.Client) error { return rawRelease.Run(ctx, c, []string{key}, tok).Err() }) < len(w.clients)/2+1 {
			return fmt.Errorf("raw compare-and-delete: %w", errors.Join(w.errs...))
		}
		return nil
	}
	if granted < len(w.clients)/2+1 {
		err := fmt.Errorf("raw SET NX granted by %d of %d: %w", granted, len(w.clients), errors.Join(w.errs...))
		return nil, errors.Join(err, unlock(ctx))
	}
	return unlock, nil
}

func (w *rawWorker) close() {}

// rawTarget is the floor of a group, or with fenced its fenced floor.
func rawTarget(group string, clients []*goredis.Client, fenced bool) *target {
	name, role := "raw SET NX PX + compare-and-delete", roleFloor
	if len(clients) > 1 {
		name = "raw parallel fan-out"
	}
	if fenced {
		name, role = name+", fenced (INCR of one counter in the SET script)", roleFencedFloor
	}
	return &target{
		name: name, group: group, role: role,
		newWorker: func(context.Context) (worker, error) {
			return &rawWorker{clients: clients, fenced: fenced, errs: make([]error, len(clients))}, nil
		},
	}
}

// redsyncWorker locks with a redsync Mutex, one per lock (a Mutex is not
// safe for concurrent use).
type redsyncWorker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (w *redsyncWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := w.rs.NewMutex(key, w.opts...)
	if err := m.LockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		var nodeTaken *redsync.ErrNodeTaken
		if ctx.Err() == nil && (errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)) {
			return nil, fmt.Errorf("%w: %w", errGaveUp, err)
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock refused")
		}
		return err
	}, nil
}

func (w *redsyncWorker) close() {}

// redsyncTarget measures redsync over clients with its shipped defaults
// (32 tries, 50-250 ms random delay) but the TTL, or with retryDelay.
func redsyncTarget(group string, clients []*goredis.Client, retryDelay time.Duration) *target {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = rsgoredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	opts := []redsync.Option{redsync.WithExpiry(lockTTL)}
	variant := ""
	if retryDelay > 0 {
		opts = append(opts, redsync.WithRetryDelay(retryDelay))
		variant = fmt.Sprintf("%v retry", retryDelay)
	}
	return &target{
		name: "redsync", variant: variant, group: group, role: rolePeer,
		newWorker: func(context.Context) (worker, error) { return &redsyncWorker{rs: rs, opts: opts}, nil },
	}
}

// redislockWorker locks with bsm/redislock, retrying as its strategy says
// until ctx ends (Obtain's own deadline is the TTL when ctx has none).
type redislockWorker struct {
	c     *redislock.Client
	retry func() redislock.RetryStrategy
}

func (w *redislockWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := w.c.Obtain(ctx, key, lockTTL, &redislock.Options{RetryStrategy: w.retry()})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (w *redislockWorker) close() {}

// redislockTarget measures bsm/redislock on client. Its shipped default is
// one attempt (NoRetry): a blocking lock needs a strategy, so "defaults"
// use the one in its documentation's retry example (every 100 ms).
func redislockTarget(group string, client *goredis.Client, every time.Duration) *target {
	c := redislock.New(client)
	variant := ""
	if every != 100*time.Millisecond {
		variant = fmt.Sprintf("%v retry", every)
	}
	return &target{
		name: "redislock", variant: variant, group: group, role: rolePeer,
		newWorker: func(context.Context) (worker, error) {
			return &redislockWorker{c: c, retry: func() redislock.RetryStrategy { return redislock.LinearBackoff(every) }}, nil
		},
	}
}

// etcdMutexWorker locks with etcd's concurrency.Mutex on a session of its
// own (goroutines sharing a session would share the Mutex's key, which is
// the session's lease: the Mutex would be re-entrant between them).
type etcdMutexWorker struct {
	s *concurrency.Session
}

func (w *etcdMutexWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(w.s, "/bench-mutex/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (w *etcdMutexWorker) close() { _ = w.s.Close() }

func etcdMutexTarget(c *clients) *target {
	return &target{
		name: "etcd concurrency.Mutex", group: groupEtcd, role: rolePeer,
		newWorker: func(ctx context.Context) (worker, error) {
			s, err := concurrency.NewSession(c.etcd, concurrency.WithContext(context.WithoutCancel(ctx)))
			if err != nil {
				return nil, err
			}
			return &etcdMutexWorker{s: s}, nil
		},
	}
}

// backends are dsync's backends of one run, shared by the workers of the
// targets that share them.
type backends struct {
	redis, redlock, etcd *dsync.Backend
}

func openBackends(ctx context.Context, s *servers) (*backends, error) {
	var b backends
	var err error
	for _, o := range []struct {
		dst **dsync.Backend
		url string
	}{{&b.redis, s.redisURL()}, {&b.redlock, s.redlockURL()}, {&b.etcd, s.etcdURL()}} {
		if *o.dst, err = dsync.Open(ctx, o.url); err != nil {
			b.close()
			return nil, err
		}
	}
	if err := waitQuarantine(ctx, b.redlock); err != nil {
		b.close()
		return nil, err
	}
	for _, x := range []*dsync.Backend{b.redis, b.redlock} {
		if err := warmFences(ctx, x); err != nil {
			b.close()
			return nil, err
		}
	}
	return &b, nil
}

func (b *backends) close() {
	for _, x := range []*dsync.Backend{b.redis, b.redlock, b.etcd} {
		if x != nil {
			_ = x.Close()
		}
	}
}

// allTargets lists every target, grouped by servers: the uncontended and
// throughput scenarios run the floors and each library with its shipped
// retry settings (and dsync without fencing); the contention scenario runs
// the libraries with shipped settings, the polling ones with a 1 ms retry
// too, and dsync with a client per goroutine, as separate processes are.
func allTargets(s *servers, c *clients, b *backends) []*target {
	dflt := &locker.Options{TTL: lockTTL}
	nofence := &locker.Options{TTL: lockTTL, NoFencing: true}
	cyc := func(t *target) *target { t.cycles = true; return t }
	con := func(t *target) *target { t.contended = true; return t }
	both := func(t *target) *target { return cyc(con(t)) }
	return []*target{
		cyc(rawTarget(groupRedis, []*goredis.Client{c.single}, false)),
		cyc(rawTarget(groupRedis, []*goredis.Client{c.single}, true)),
		both(dsyncTarget(groupRedis, "", b.redis, "", dflt)),
		cyc(dsyncTarget(groupRedis, "no fencing", b.redis, "", nofence)),
		cyc(dsyncTarget(groupRedis, variantTry, b.redis, "", dflt)),
		cyc(dsyncTarget(groupRedis, variantTryNoFence, b.redis, "", nofence)),
		con(dsyncTarget(groupRedis, "8 clients", nil, s.redisURL(), dflt)),
		both(redsyncTarget(groupRedis, []*goredis.Client{c.single}, 0)),
		con(redsyncTarget(groupRedis, []*goredis.Client{c.single}, time.Millisecond)),
		both(redislockTarget(groupRedis, c.single, 100*time.Millisecond)),
		con(redislockTarget(groupRedis, c.single, time.Millisecond)),

		cyc(rawTarget(groupRedlock, c.masters, false)),
		cyc(rawTarget(groupRedlock, c.masters, true)),
		both(dsyncTarget(groupRedlock, "", b.redlock, "", dflt)),
		cyc(dsyncTarget(groupRedlock, "no fencing", b.redlock, "", nofence)),
		cyc(dsyncTarget(groupRedlock, variantTry, b.redlock, "", dflt)),
		cyc(dsyncTarget(groupRedlock, variantTryNoFence, b.redlock, "", nofence)),
		con(dsyncTarget(groupRedlock, "8 clients", nil, s.redlockURL(), dflt)),
		both(redsyncTarget(groupRedlock, c.masters, 0)),
		con(redsyncTarget(groupRedlock, c.masters, time.Millisecond)),

		both(dsyncTarget(groupEtcd, "", b.etcd, "", dflt)),
		cyc(dsyncTarget(groupEtcd, variantTry, b.etcd, "", dflt)),
		con(dsyncTarget(groupEtcd, "8 clients", nil, s.etcdURL(), dflt)),
		both(etcdMutexTarget(c)),
	}
}
