package etcd

import (
	"cmp"
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// Defaults of Options.
const (
	// DefaultPrefix is the key prefix used when Options.Prefix is empty.
	DefaultPrefix = "dsync/"
	// DefaultMinTTL is etcd's minimum lease TTL with its default timing
	// (--election-timeout 1000ms): 1.5 election timeouts, rounded up to
	// whole seconds.
	DefaultMinTTL = 2 * time.Second
	// DefaultRequestTimeout bounds each request (etcdctl's default
	// command timeout).
	DefaultRequestTimeout = 5 * time.Second
)

// maxTTLSeconds is etcd's largest lease TTL (lease.MaxLeaseTTL).
const maxTTLSeconds = 9_000_000_000

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Prefix is put before every etcd key the backend writes (see the
	// package documentation for the layout). A "/" is appended when it does
	// not end with one, so that one application's prefix never extends
	// another's. Default: "dsync/".
	Prefix string
	// MinTTL is the cluster's minimum lease TTL, which Capabilities
	// reports: etcd raises shorter TTLs to it, and Grant.TTL always says
	// what was applied. It must be a whole number of seconds. Default
	// DefaultMinTTL (2s, etcd's default timing); the URL opener learns the
	// real value from the cluster.
	MinTTL time.Duration
	// RequestTimeout bounds each request of the backend (its few round
	// trips together), so that a request whose context has no deadline
	// still returns when the cluster stops answering. Default
	// DefaultRequestTimeout (5s).
	RequestTimeout time.Duration
	// BackendOptions name the backend (default "etcd"), set the defaults
	// of the primitives built on it and choose where its telemetry goes.
	dsync.BackendOptions
}

// driver is the etcd driver. It implements backends.Driver and is safe
// for concurrent use. Every answer about a hold comes from etcd.
type driver struct {
	client *clientv3.Client
	owned  bool // Close closes client: it was created from a URL
	prefix string
	caps   backends.Capabilities
	// timeout is Options.RequestTimeout, filled in.
	timeout time.Duration

	// rev is the highest store revision any response has shown; a release
	// watch starts just after it, which etcd serves from its synced path.
	rev atomic.Int64

	pool  leasePool
	renew renewer

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	notify notifier
}

var _ backends.Driver = (*driver)(nil)

// New returns a backend over client. It makes no I/O. A nil client or an
// invalid option is an *dsync.InvalidError.
//
// The backend does not close client: the application that created it
// keeps it, and closes it after closing the backend. clientv3 retries a
// call only when it is safe (reads and lease renewals, and writes that
// never left the client), so every request remains one attempt.
func New(client *clientv3.Client, opts *Options) (*dsync.Backend, error) {
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

func newDriver(client *clientv3.Client, opts *Options, owned bool) (*driver, error) {
	if client == nil {
		return nil, backends.Invalid("client", "nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if o.RequestTimeout < 0 {
		return nil, backends.Invalid("request timeout", "%v is negative", o.RequestTimeout)
	}
	minTTL := o.MinTTL
	switch {
	case minTTL == 0:
		minTTL = DefaultMinTTL
	case minTTL < time.Second || minTTL%time.Second != 0:
		return nil, backends.Invalid("min ttl", "%v is not a positive whole number of seconds", minTTL)
	}
	d := &driver{
		client:  client,
		owned:   owned,
		prefix:  prefix,
		timeout: cmp.Or(o.RequestTimeout, DefaultRequestTimeout),
		caps: backends.Capabilities{
			ReleaseNotices: true,
			Name:           "etcd",
			MaxLimit:       MaxSemaphoreSize,
			Fencing:        true,
			TTLResolution:  time.Second,
			MinTTL:         minTTL,
			MaxTTL:         maxTTLSeconds * time.Second,
			Order:          backends.StrictOrder,
		},
	}
	d.pool.init()
	d.renew.init(client)
	d.notify.init(d)
	return d, nil
}

// Capabilities reports locks and semaphores of up to MaxSemaphoreSize
// permits, fencing, whole-second TTLs, the cluster's minimum TTL and etcd's
// maximum (9e9 s). It makes no I/O.
func (d *driver) Capabilities() backends.Capabilities { return d.caps }

// key returns the etcd key that holds the lock named name: the prefix
// (which always ends in "/") followed by name with "%" and "/" escaped as
// "%25" and "%2F". The permits of a semaphore of that name live below this
// key and a "/". It returns an *InvalidError for an empty name.
func (d *driver) key(name string) (string, error) {
	if name == "" {
		return "", backends.Invalid("key", "empty")
	}
	return d.prefix + escapeName(name), nil
}

// escapeName makes a name one path segment: no name can then nest under
// another, or under the permit keys a semaphore keeps below its own name,
// and distinct names stay distinct.
func escapeName(name string) string {
	if !strings.ContainsAny(name, "%/") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := range len(name) {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func checkToken(token string) error {
	if token == "" {
		return backends.Invalid("token", "empty")
	}
	if strings.IndexByte(token, '\n') >= 0 {
		return backends.Invalid("token", "contains a newline, which the etcd backend uses to separate token and value")
	}
	return nil
}

// encodeValue is what the hold's key stores: the token, a newline, the
// request's value.
func encodeValue(token string, value []byte) string {
	return token + "\n" + string(value)
}

// decodeValue splits a hold's stored value into token and value. A value
// without a newline (not written by dsync) is all token.
func decodeValue(v []byte) (token string, value []byte) {
	t, rest, found := strings.Cut(string(v), "\n")
	if !found || rest == "" {
		return t, nil
	}
	return t, []byte(rest)
}

// ttlSeconds rounds a TTL up to whole seconds, as etcd leases have them.
func (d *driver) ttlSeconds(ttl time.Duration) (int64, error) {
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return 0, err
	}
	return int64(math.Ceil(ttl.Seconds())), nil
}

// seen records a revision from a response header.
func (d *driver) seen(h interface{ GetRevision() int64 }) {
	if h == nil {
		return
	}
	rev := h.GetRevision()
	for {
		cur := d.rev.Load()
		if rev <= cur || d.rev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// bound bounds one driver call by the request timeout.
func (d *driver) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// begin checks that the driver is open and names the etcd key of key.
func (d *driver) begin(key, token string) (string, error) {
	if d.closed.Load() {
		return "", backends.ErrClosed
	}
	k, err := d.key(key)
	if err != nil {
		return "", err
	}
	if err := checkToken(token); err != nil {
		return "", err
	}
	return k, nil
}

// wrap marks an error caused by a concurrent Close as ErrClosed as well,
// and a request etcd refused for good as ErrInvalid (see refusal).
func (d *driver) wrap(err error) error {
	return backends.MarkClosed(d.closed.Load(), refusal(err))
}

// Close stops release watches (awaiting their goroutines) and closes the
// client if the driver created it from a URL; a client passed to New is
// left open. Holds are left to expire on the server. Later calls return
// ErrClosed. Close is idempotent and returns the first call's result.
func (d *driver) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		d.notify.close()
		d.renew.close()
		if d.owned {
			d.closeErr = d.client.Close()
		}
	})
	return d.closeErr
}
