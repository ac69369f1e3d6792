package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "dsync:"

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Prefix is put before every Redis key and channel the driver uses (see
	// the package documentation for the layout). It must not contain "{" or
	// "}", which would break the Cluster hash tag. Default: "dsync:".
	Prefix string
}

var (
	//go:embed fence.lua
	fenceSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed sem_common.lua
	semCommonSrc string
	//go:embed sem_acquire.lua
	semAcquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed holder.lua
	holderSrc string

	// The scripts that draw a fencing token start with fence.lua, and
	// those that may meet a semaphore with its helpers.
	acquireScript    = goredis.NewScript(fenceSrc + acquireSrc)
	semAcquireScript = goredis.NewScript(fenceSrc + semCommonSrc + semAcquireSrc)
	releaseScript    = goredis.NewScript(semCommonSrc + releaseSrc)
	refreshScript    = goredis.NewScript(semCommonSrc + refreshSrc)
	holderScript     = goredis.NewScript(semCommonSrc + holderSrc)
)

// The acquire scripts' fencing flags, boxed once rather than on every call.
var drawFence, noFence any = "1", "0"

// maxLimit is the largest semaphore size the driver accepts
// (Capabilities.MaxLimit). It bounds the work of one script, during which
// the server serves nobody else: the call that finds a full semaphore whose
// holders all expired at once prunes them all. Measured on a loaded 2-core
// machine, pruning 65536 holders with values blocked the server for 260 ms
// (60 ms without values); 4096 keeps that between 8 and 16 ms.
const maxLimit = 1 << 12

var capabilities = backends.Capabilities{
	ReleaseNotices: true,
	Name:           "redis",
	MaxLimit:       maxLimit,
	Fencing:        true,
	TTLResolution:  time.Millisecond,
}

// Driver is the single-instance Redis driver. It implements backends.Driver
// and backends.Notifier, and is safe for concurrent use.
type Driver struct {
	client  goredis.UniversalClient
	owned   bool // Close closes client: it was created from a URL
	cluster bool // client is a *goredis.ClusterClient
	prefix  string

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	notify notifier
}

var (
	_ backends.Driver = (*Driver)(nil)
	_ backends.Driver = (*Driver)(nil)
)

// New returns a driver over client, which may be a plain client, a Sentinel
// failover client or a Cluster client. It makes no I/O. A nil client or an
// invalid option is an *InvalidError.
//
// The driver does not close client: the application that created it keeps
// it, and closes it after closing the driver. The client is used as
// configured; to keep the SPI's promise of one attempt per call bounded by
// its context, configure it with MaxRetries: -1 (go-redis retries a command
// whose reply was lost, which can turn an applied acquire into a reported
// ErrNotAcquired) and ContextTimeoutEnabled: true (otherwise go-redis bounds
// reads by its own ReadTimeout, not by the caller's context).
func New(client goredis.UniversalClient, opts *Options) (*Driver, error) {
	return newDriver(client, opts, false)
}

func newDriver(client goredis.UniversalClient, opts *Options, owned bool) (*Driver, error) {
	if client == nil {
		return nil, backends.Invalid("client", "nil")
	}
	prefix, err := opts.prefix()
	if err != nil {
		return nil, err
	}
	_, cluster := client.(*goredis.ClusterClient)
	d := &Driver{client: client, owned: owned, cluster: cluster, prefix: prefix}
	d.notify.init(d)
	return d, nil
}

func (o *Options) prefix() (string, error) {
	if o == nil || o.Prefix == "" {
		return DefaultPrefix, nil
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return "", backends.Invalid("prefix", "%s", err)
	}
	return o.Prefix, nil
}

func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%q contains { or }, which would break the Redis Cluster hash tag", p)
	}
	return nil
}

// Capabilities reports locks and semaphores of up to 4096 holders, with
// fencing and 1 ms TTLs.
func (d *Driver) Capabilities() backends.Capabilities { return capabilities }

// holdKey returns the Redis key of key's hold, P{K}.
func (d *Driver) holdKey(key string) (string, error) {
	if key == "" {
		return "", backends.Invalid("key", "empty")
	}
	// A key starting with "}" makes an empty hash tag, so Cluster would hash
	// the whole name and scatter the hold and its counter across slots.
	if d.cluster && key[0] == '}' {
		return "", backends.Invalid("key", "%q starts with }, which Redis Cluster hash tags cannot keep in one slot", key)
	}
	return d.prefix + "{" + key + "}", nil
}

func checkToken(token string) error {
	if token == "" {
		return backends.Invalid("token", "empty")
	}
	if strings.IndexByte(token, '\n') >= 0 {
		return backends.Invalid("token", "contains a newline, which the redis backend uses to separate token and value")
	}
	return nil
}

// Acquire makes one attempt to hold req.Key.
//
// A lock (req.Limit 0 or 1) is a SET NX PX, in a script that also
// increments the key's fence counter when req.Fence is set (see FenceKey;
// a missing counter starts at the server's clock in microseconds). It returns
// ErrNotAcquired when the key is held, and the error of
// backends.LimitMismatch when a semaphore holds it (without req.Fence, that
// check costs a second round trip, made only after the SET NX failed).
//
// A semaphore (req.Limit > 1) is one script on a sorted set of holders
// scored by expiry on the server's clock: it prunes the expired holders and
// adds this one if fewer than req.Limit are left. It returns
// ErrNotAcquired when every slot is taken, and the error of
// backends.LimitMismatch when the live holders have another size or a lock
// holds the key. Its fence counter is the key's lock's, shared by every
// size.
//
// Grant.TTL is req.TTL truncated to whole milliseconds.
func (d *Driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	return d.acquire(ctx, req, acquireScript, 0)
}

// acquire takes a lock with script (acquire.lua, or acquire_seeded.lua),
// a missing fence counter starting at the server's clock rounded down to
// seedStep (0: to the microsecond), or a semaphore with sem_acquire.lua
// when script is acquire.lua.
func (d *Driver) acquire(ctx context.Context, req backends.Request, script *goredis.Script, seedStep time.Duration) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, capabilities); err != nil {
		return backends.Grant{}, err
	}
	if err := checkToken(req.Token); err != nil {
		return backends.Grant{}, err
	}
	hold, err := d.holdKey(req.Key)
	if err != nil {
		return backends.Grant{}, err
	}
	ttl := req.TTL.Truncate(time.Millisecond)
	if req.Limit > 1 {
		if script != acquireScript {
			return backends.Grant{}, fmt.Errorf("%w: a seeded acquire takes locks only (limit %d requested)", backends.ErrUnsupported, req.Limit)
		}
		return d.acquireSem(ctx, req, hold, ttl)
	}
	val := req.Token
	if len(req.Value) > 0 {
		val = req.Token + "\n" + string(req.Value)
	}
	g := backends.Grant{TTL: ttl}
	if !req.Fence {
		// Without a fencing token the hold is a plain SET NX PX: Redis
		// runs it several times faster than a script.
		ok, err := d.client.SetArgs(ctx, hold, val, goredis.SetArgs{Mode: "NX", TTL: ttl}).Result()
		if errors.Is(err, goredis.Nil) {
			return backends.Grant{}, d.heldBy(ctx, req.Key, hold)
		}
		if err != nil {
			return backends.Grant{}, d.wrap(err)
		}
		if ok != "OK" {
			return backends.Grant{}, fmt.Errorf("redis: SET NX answered %q", ok)
		}
		return g, nil
	}
	n, err := script.Run(ctx, d.client, []string{hold, fenceKey(d.prefix, hold)},
		val, ttl.Milliseconds(), drawFence, seedStepArg(seedStep)).Int64()
	if err != nil {
		return backends.Grant{}, d.wrap(err)
	}
	switch {
	case n == 0:
		return backends.Grant{}, backends.ErrNotAcquired
	case n < 0:
		return backends.Grant{}, backends.LimitMismatch(req.Key, 1, int(-n))
	}
	g.Fence = uint64(n)
	return g, nil
}

// heldBy is the verdict on a lock whose SET NX failed: LimitMismatch when
// a semaphore holds the key, else ErrNotAcquired. It asks the server for
// the key's type, and for the semaphore's size when it is one; if either
// call fails, the SET NX's verdict, ErrNotAcquired, stands.
func (d *Driver) heldBy(ctx context.Context, key, hold string) error {
	if kind, err := d.client.Type(ctx, hold).Result(); err != nil || kind != "zset" {
		return backends.ErrNotAcquired
	}
	s, err := d.client.ZScore(ctx, hold, "").Result()
	if err != nil || s >= 0 {
		return backends.ErrNotAcquired
	}
	return backends.LimitMismatch(key, 1, int(-s))
}

// acquireSem runs sem_acquire.lua for req (req.Limit > 1), whose checked
// hold key is hold and TTL ttl.
func (d *Driver) acquireSem(ctx context.Context, req backends.Request, hold string, ttl time.Duration) (backends.Grant, error) {
	fence := noFence
	if req.Fence {
		fence = drawFence
	}
	n, err := semAcquireScript.Run(ctx, d.client, []string{hold, fenceKey(d.prefix, hold), hold + ":values"},
		req.Token, ttl.Milliseconds(), fence, req.Limit, req.Value).Int64()
	if err != nil {
		return backends.Grant{}, d.wrap(err)
	}
	switch {
	case n == 0:
		return backends.Grant{}, backends.ErrNotAcquired
	case n < 0:
		return backends.Grant{}, backends.LimitMismatch(req.Key, req.Limit, int(-n))
	}
	g := backends.Grant{TTL: ttl}
	if req.Fence {
		g.Fence = uint64(n)
	}
	return g, nil
}

// tokenHold checks a call on the hold of key owned by token, before any I/O,
// and returns the hold's Redis key.
func (d *Driver) tokenHold(key, token string) (string, error) {
	if d.closed.Load() {
		return "", backends.ErrClosed
	}
	hold, err := d.holdKey(key)
	if err != nil {
		return "", err
	}
	return hold, checkToken(token)
}

// Refresh resets the TTL of the hold owned by token: a compare-and-PEXPIRE
// for a lock; for a semaphore, a new expiry of now + ttl on the server's
// clock for token's holder, after the expired holders are pruned. It never
// re-creates an expired hold: that, or a hold owned by another token, is
// ErrNotHeld, and no other holder is touched.
func (d *Driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	hold, err := d.tokenHold(key, token)
	if err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, capabilities); err != nil {
		return err
	}
	n, err := refreshScript.Run(ctx, d.client, []string{hold, hold + ":values"}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return d.wrap(err)
	}
	if n == 0 {
		return backends.ErrNotHeld
	}
	return nil
}

// Release deletes the hold owned by token (a lock's key, or token's member
// of a semaphore's holders) and publishes a release notice on the key's
// channel, the same for locks and semaphores. A hold that expired or
// belongs to another token is reported as ErrNotHeld, and no other hold is
// touched (expired holders of a semaphore are pruned).
func (d *Driver) Release(ctx context.Context, key, token string) error {
	return d.release(ctx, key, token, publish)
}

// The release script's flag, boxed once.
var publish, silent any = "1", "0"

func (d *Driver) release(ctx context.Context, key, token string, notify any) error {
	hold, err := d.tokenHold(key, token)
	if err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, d.client, []string{hold, hold + ":values"}, token, notify).Int64()
	if err != nil {
		return d.wrap(err)
	}
	if n == 0 {
		return backends.ErrNotHeld
	}
	return nil
}

// Holder reports the value stored with key's hold and its remaining TTL as
// the server reports it (zero for a key without expiry, which dsync never
// writes), or ErrNotHeld when nobody holds key. For a semaphore it reports
// the live holder that expires last.
func (d *Driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	hold, err := d.holdKey(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	res, err := holderScript.Run(ctx, d.client, []string{hold, hold + ":values"}).Slice()
	if errors.Is(err, goredis.Nil) {
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	if err != nil {
		return backends.HolderInfo{}, d.wrap(err)
	}
	if len(res) != 2 {
		return backends.HolderInfo{}, fmt.Errorf("redis: holder.lua returned %d values, want 2", len(res))
	}
	v, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return backends.HolderInfo{}, fmt.Errorf("redis: holder.lua returned %T, %T, want string, integer", res[0], res[1])
	}
	var info backends.HolderInfo
	if v != "" {
		info.Value = []byte(v)
	}
	if pttl > 0 {
		info.TTL = time.Duration(pttl) * time.Millisecond
	}
	return info, nil
}

// wrap marks an error caused by a concurrent Close as ErrClosed as well.
func (d *Driver) wrap(err error) error { return backends.MarkClosed(d.closed.Load(), err) }

// Close stops release notices (closing the shared pub/sub connection and
// awaiting its goroutine) and closes the client if the driver created it
// from a URL; a client passed to New is left open. Holds are left to expire
// on the server. Later calls return ErrClosed. Close is idempotent and
// returns the first call's result.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		d.notify.close()
		if d.owned {
			d.closeErr = d.client.Close()
		}
	})
	return d.closeErr
}
