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
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed holder.lua
	holderSrc string

	acquireScript = goredis.NewScript(acquireSrc)
	releaseScript = goredis.NewScript(releaseSrc)
	refreshScript = goredis.NewScript(refreshSrc)
	holderScript  = goredis.NewScript(holderSrc)
)

// The acquire script's fencing flag, boxed once rather than on every call.
var drawFence any = "1"

var capabilities = backends.Capabilities{
	Name:          "redis",
	MaxLimit:      1,
	Fencing:       true,
	TTLResolution: time.Millisecond,
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
	_ backends.Driver   = (*Driver)(nil)
	_ backends.Notifier = (*Driver)(nil)
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

// Capabilities reports a lock-only driver with fencing and 1 ms TTLs.
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

// Acquire makes one attempt to hold req.Key: SET NX PX, then INCR of the
// key's fence counter when req.Fence is set. It returns ErrNotAcquired when
// the key is held; Grant.TTL is req.TTL truncated to whole milliseconds.
func (d *Driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	return d.acquire(ctx, req, acquireScript)
}

func (d *Driver) acquire(ctx context.Context, req backends.Request, script *goredis.Script) (backends.Grant, error) {
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
	val := req.Token
	if len(req.Value) > 0 {
		val = req.Token + "\n" + string(req.Value)
	}
	ttl := req.TTL.Truncate(time.Millisecond)
	g := backends.Grant{TTL: ttl}
	if !req.Fence {
		// Without a fencing token the hold is a plain SET NX PX: Redis
		// runs it several times faster than a script.
		ok, err := d.client.SetArgs(ctx, hold, val, goredis.SetArgs{Mode: "NX", TTL: ttl}).Result()
		if errors.Is(err, goredis.Nil) {
			return backends.Grant{}, backends.ErrNotAcquired
		}
		if err != nil {
			return backends.Grant{}, d.wrap(err)
		}
		if ok != "OK" {
			return backends.Grant{}, fmt.Errorf("redis: SET NX answered %q", ok)
		}
		return g, nil
	}
	n, err := script.Run(ctx, d.client, []string{hold, hold + ":fence"}, val, ttl.Milliseconds(), drawFence).Int64()
	if err != nil {
		return backends.Grant{}, d.wrap(err)
	}
	if n == 0 {
		return backends.Grant{}, backends.ErrNotAcquired
	}
	g.Fence = uint64(n)
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

// Refresh resets the TTL of the hold owned by token with a compare-and-
// PEXPIRE. It never re-creates an expired hold: that, or a hold owned by
// another token, is ErrNotHeld.
func (d *Driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	hold, err := d.tokenHold(key, token)
	if err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, capabilities); err != nil {
		return err
	}
	n, err := refreshScript.Run(ctx, d.client, []string{hold}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return d.wrap(err)
	}
	if n == 0 {
		return backends.ErrNotHeld
	}
	return nil
}

// Release deletes the hold owned by token with a compare-and-delete and
// publishes a release notice. A hold that expired or belongs to another
// token is left alone and reported as ErrNotHeld.
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
	n, err := releaseScript.Run(ctx, d.client, []string{hold}, token, notify).Int64()
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
// writes), or ErrNotHeld when nobody holds key.
func (d *Driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	hold, err := d.holdKey(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	res, err := holderScript.Run(ctx, d.client, []string{hold}).Slice()
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
