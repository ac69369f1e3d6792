package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = redisnode.DefaultPrefix

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Prefix is put before every Redis key and channel the backend uses
	// (see docs/redis.md for the layout). It must not contain "{" or "}",
	// which would break the Cluster hash tag. Default: "dsync:".
	Prefix string
	// BackendOptions name the backend (default "redis"), set the defaults
	// of the primitives built on it and choose where its telemetry goes.
	dsync.BackendOptions
}

var capabilities = backends.Capabilities{
	ReleaseNotices: true,
	Name:           "redis",
	MaxLimit:       redisnode.MaxSetSize,
	Fencing:        true,
	TTLResolution:  time.Millisecond,
	Order:          backends.BoundedBarging,
}

// driver is the single-instance Redis driver. It implements
// backends.Driver and is safe for concurrent use.
type driver struct {
	node  *redisnode.Node
	owned bool // Close closes the client: it was created from a URL

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	notify *redisnode.Notifier
}

var _ backends.Driver = (*driver)(nil)

// New returns a backend over client, which may be a plain client, a
// Sentinel failover client or a Cluster client. It makes no I/O. A nil
// client or an invalid option is an *dsync.InvalidError, and so is a
// *goredis.Ring: a Ring moves keys to other shards when one misses its
// heartbeats, where a held lock is free and the fence counter may be
// behind.
//
// The backend does not close client: the application that created it
// keeps it, and closes it after closing the backend. The client is used as
// configured; to keep the promise of one attempt per request bounded by
// its context, configure it with MaxRetries: -1 (go-redis retries a
// command whose reply was lost, which can turn an applied acquire into a
// reported refusal) and ContextTimeoutEnabled: true (otherwise go-redis
// bounds reads by its own ReadTimeout, not by the caller's context).
// Besides its context, each request is bounded by the client's
// ReadTimeout and WriteTimeout (go-redis: 5 s by default); with both
// disabled, a request is bounded by its context alone.
func New(client goredis.UniversalClient, opts *Options) (*dsync.Backend, error) {
	if opts == nil {
		opts = &Options{}
	}
	d, err := newDriver(client, opts, false)
	if err != nil {
		return nil, err
	}
	b, err := dsync.NewBackend(d, &opts.BackendOptions)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return b, nil
}

func newDriver(client goredis.UniversalClient, opts *Options, owned bool) (*driver, error) {
	var prefix string
	if opts != nil {
		prefix = opts.Prefix
	}
	node, err := redisnode.New(client, prefix)
	if err != nil {
		return nil, err
	}
	return &driver{node: node, owned: owned, notify: redisnode.NewNotifier(node)}, nil
}

// Capabilities reports locks and semaphores of up to 4096 holders, with
// fencing, 1 ms TTLs, and a lock's waiters served in order with bounded
// barging.
func (d *driver) Capabilities() backends.Capabilities { return capabilities }

// CheckTTL implements backends.Driver: the TTL rules of Capabilities.
func (d *driver) CheckTTL(ttl time.Duration) error { return backends.CheckTTL(ttl, capabilities) }

// Acquire makes one attempt to hold req.Key: a lock (req.Limit 0 or 1) is
// SET NX PX, in a script that also draws the key's fencing token when
// req.Fence is set; a semaphore (req.Limit > 1) is one script on a sorted
// set of holders scored by expiry on the server's clock. It returns
// ErrNotAcquired when the key is held (every slot taken), and the error of
// backends.LimitMismatch when the key's live holds have another size (a
// lock being size 1). Grant.TTL is req.TTL truncated to whole milliseconds.
//
// A lock's attempt with req.Waiter is one script that also keeps the key's
// line: refused, the waiter joins it; a lock kept for the waiter, it
// takes. A lock released is kept for the first live waiter in line for
// backends.HandOver (see package doc).
func (d *driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, capabilities); err != nil {
		return backends.Grant{}, err
	}
	h := redisnode.Hold{Token: req.Token, Value: req.Value, TTL: req.TTL, Fence: req.Fence, Waiter: req.Waiter}
	var fence uint64
	var err error
	if req.Limit > 1 {
		fence, err = d.node.AcquireSet(ctx, req.Key, req.Limit, h)
	} else {
		fence, err = d.node.Acquire(ctx, redisnode.Target{Key: req.Key}, h)
	}
	if err != nil {
		return backends.Grant{}, d.wrap(err)
	}
	return backends.Grant{Fence: fence, TTL: req.TTL.Truncate(time.Millisecond)}, nil
}

// Refresh resets the TTL of the hold owned by token: a compare-and-PEXPIRE
// for a lock; for a semaphore, a new expiry of now + ttl on the server's
// clock for token's holder, after the expired holders are pruned. It never
// re-creates an expired hold: that, or a hold owned by another token, is
// ErrNotHeld, and no other holder is touched.
func (d *driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	if err := backends.CheckTTL(ttl, capabilities); err != nil {
		return err
	}
	return d.wrap(d.node.Refresh(ctx, redisnode.Target{Key: key}, token, ttl))
}

// Release deletes the hold owned by token (a lock's key, or token's member
// of a semaphore's holders) and publishes a release notice on the key's
// channel; a lock is kept for the first live waiter in its line, if any,
// for backends.HandOver, and a lock with nobody in its line is released
// without a notice (nobody waits for it). A hold that expired or belongs to another
// token is reported as ErrNotHeld, and no other hold is touched.
func (d *driver) Release(ctx context.Context, key, token string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	return d.wrap(d.node.Release(ctx, redisnode.Target{Key: key}, token, true))
}

// Holder reports the value stored with key's hold and its remaining TTL as
// the server reports it, or ErrNotHeld when nobody holds key. For a
// semaphore it reports the live holder that expires last.
func (d *driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	info, err := d.node.Holder(ctx, key)
	return info, d.wrap(err)
}

// WatchReleases subscribes to release notices for key, the same for locks
// and semaphores. It returns once the SUBSCRIBE is written to the driver's
// one pub/sub connection (dialed on first use, within ctx), without waiting
// for the server to confirm it: a release in the next instant may go
// unnoticed. The caller must Close the subscription.
func (d *driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	sub, err := d.notify.Watch(ctx, key)
	return sub, d.wrap(err)
}

// wrap turns a node's *LimitError into backends.LimitMismatch, and marks an
// error caused by a concurrent Close as ErrClosed as well.
func (d *driver) wrap(err error) error {
	if err == nil {
		return nil
	}
	var le *redisnode.LimitError
	if errors.As(err, &le) {
		return backends.LimitMismatch(le.Key, le.Limit, le.Holders)
	}
	err = redisnode.Refusal(err)
	if errors.Is(err, backends.ErrNotHeld) || errors.Is(err, backends.ErrNotAcquired) || errors.Is(err, backends.ErrInvalid) {
		return err
	}
	return backends.MarkClosed(d.closed.Load(), err)
}

// Close stops release notices (closing the shared pub/sub connection and
// awaiting its goroutine) and closes the client if the driver created it
// from a URL; a client passed to New is left open. Holds are left to expire
// on the server. Later calls return ErrClosed. Close is idempotent and
// returns the first call's result.
func (d *driver) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		d.notify.Close()
		if d.owned {
			d.closeErr = d.node.Client().Close()
		}
	})
	return d.closeErr
}

// Leave takes waiter out of key's line; if the lock was kept for waiter,
// it goes to the next live waiter in line (or is freed) and waiters are
// told.
func (d *driver) Leave(ctx context.Context, key, waiter string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	return d.wrap(d.node.Leave(ctx, key, waiter))
}
