package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// Defaults of Options.
const (
	DefaultMaxTTL = time.Minute
	// The per-node timeout defaults to a few percent of the TTL, within
	// these bounds.
	defaultNodeTimeoutShare = 0.03
	minNodeTimeout          = 50 * time.Millisecond
	maxNodeTimeout          = time.Second
	probeTimeout            = 5 * time.Second
)

// ErrNoQuorum: fewer than a quorum of nodes answered (down, paused, cut off,
// or quarantined after a restart). Errors matching it also match
// dsync.ErrUnavailable, and dsync.ErrNotAcquired when they come from an
// acquisition.
var ErrNoQuorum error = &unavailableError{"dsync: redlock: quorum unreachable"}

// unavailableError is a sentinel that also matches dsync.ErrUnavailable.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// Is makes errors.Is(err, dsync.ErrUnavailable) true (backends.ErrUnavailable).
func (e *unavailableError) Is(target error) bool { return target == backends.ErrUnavailable }

// Options configure New and NewFromClients. A nil *Options means defaults.
type Options struct {
	// Prefix of every Redis key and channel, as in the redis backend.
	// Default "dsync:".
	Prefix string
	// NodeTimeout bounds each node's part of a fan-out: a node that has not
	// answered by then counts as a refusal. Default: 3% of the request's
	// TTL, at least 50ms and at most 1s.
	NodeTimeout time.Duration
	// MaxTTL is the largest TTL any client of these nodes uses: larger TTLs
	// are rejected, and a node whose server process is younger than MaxTTL
	// is quarantined until it is not, unless the driver saw it restart
	// persisting every write on both sides (AOF with appendfsync always;
	// docs/redlock.md). Default 1 minute.
	MaxTTL time.Duration
	// NoQuarantine lets restarted nodes vote at once. It is unsafe (a node
	// restarted without persistence can grant a held lock twice) and exists
	// for tests that show why quarantine is on by default.
	NoQuarantine bool
	// BackendOptions name the backend (default "redlock"), set the
	// defaults of the primitives built on it and choose where its
	// telemetry goes. Besides what every backend reports, Telemetry.Logger
	// receives configuration warnings (an even number of nodes, a node
	// found to be another address of a listed master) and notices of
	// nodes quarantined and back, and Telemetry.MeterProvider makes the
	// per-node instruments (request latency and outcome, restart
	// quarantine; see docs/observability.md). A node request's span is a
	// child of the span of the call it is part of.
	dsync.BackendOptions
}

// NodeError is one node's part of a failed fan-out. It unwraps to the
// node's error (a go-redis error, dsync.ErrNotAcquired for a node that
// holds the key for someone else, dsync.ErrNotHeld, ErrQuarantined for a
// node restarted less than MaxTTL ago, a context error for a node that timed out).
type NodeError struct {
	Index int
	Addr  string
	Err   error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %d (%s): %v", e.Index, e.Addr, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// MaxNodes is the most masters a backend takes.
const MaxNodes = 64

// driver is the Redlock driver over N independent Redis masters. It
// implements backends.Driver and is safe for concurrent use.
type driver struct {
	nodes       []*node
	quorum      int
	nodeTimeout time.Duration // Options.NodeTimeout; zero: from the TTL
	maxTTL      time.Duration
	caps        backends.Capabilities

	// ctx parents every node request, so that Close cuts stragglers short.
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once

	pool spawner // runs the node requests' goroutines (pool.go); Close stops it

	mu       sync.Mutex        // protects inFlight
	inFlight map[holdRef]*hold // attempts with node requests in flight

	won wonHolds // the holds won, by (key, token): where each one is

	tel *telemetry.Nodes
}

var _ backends.Driver = (*driver)(nil)

// New returns a backend over the nodes: it connects to them (one go-redis
// client each, configured from the given options) and probes them within
// ctx. It fails when fewer than a quorum answer, when two entries reach
// the same server (same run_id), or on invalid options (an
// *dsync.InvalidError). A node that did not answer here and turns out,
// when it first does, to reach the server of a node listed before it is
// an alias: it is left out of every quorum (its error matches ErrAlias
// and names both addresses; the Telemetry.Logger of opts is told), so one
// server never casts two votes. Each client is set up for dsync: no
// go-redis retries (one attempt per request), context deadlines honoured,
// and a connection hook that reads the server's run_id and uptime for the
// restart quarantine (chained after an OnConnect of the caller's). Close
// the backend to close the clients.
func New(ctx context.Context, nodes []*goredis.Options, opts *Options) (*dsync.Backend, error) {
	return newBackend(newDriver(ctx, nodes, opts, newWorkers()))
}

// newBackend returns the backend over the driver newDriver returned, with
// the options' backend settings.
func newBackend(d *driver, opts *Options, err error) (*dsync.Backend, error) {
	if err != nil {
		return nil, err
	}
	var bo dsync.BackendOptions
	if opts != nil {
		bo = opts.BackendOptions
	}
	b, err := dsync.NewBackend(d, &bo)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return b, nil
}

// newDriver returns New's driver, with the spawner of its goroutines, and
// opts for newBackend.
func newDriver(ctx context.Context, nodes []*goredis.Options, opts *Options, pool spawner) (*driver, *Options, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if err := o.check(nodes); err != nil {
		return nil, nil, err
	}
	d := &driver{
		quorum:      len(nodes)/2 + 1,
		nodeTimeout: o.NodeTimeout,
		maxTTL:      o.MaxTTL,
		inFlight:    map[holdRef]*hold{},
		pool:        pool,
		caps: backends.Capabilities{
			ReleaseNotices: true,
			Name:           "redlock", MaxLimit: MaxLimit, Fencing: true,
			TTLResolution: time.Millisecond, MaxTTL: o.MaxTTL, Order: backends.BoundedBarging,
		},
	}
	d.won.init()
	d.ctx, d.cancel = context.WithCancel(context.Background())
	addrs := make([]string, len(nodes))
	for i, no := range nodes {
		addrs[i] = no.Addr
	}
	logger := o.Telemetry.Logger
	d.tel = telemetry.NewNodes(telemetry.Settings{MeterProvider: o.Telemetry.MeterProvider, Logger: logger}, addrs)
	ids := newIdentities(logger)
	for i, no := range nodes {
		n, err := newNode(i, no, &o, ids, d.tel)
		if err != nil {
			_ = d.Close()
			return nil, nil, err
		}
		d.nodes = append(d.nodes, n)
	}
	d.tel.ObserveQuarantine(func(i int) time.Time { return d.nodes[i].quarantinedUntil() })
	if err := d.probe(ctx); err != nil {
		_ = d.Close()
		return nil, nil, err
	}
	switch {
	case len(nodes) < 3:
		d.tel.Log(slog.LevelWarn, "dsync: redlock: fewer than 3 nodes tolerate no node down",
			slog.Int("nodes", len(nodes)), slog.Int("quorum", d.quorum))
	case len(nodes)%2 == 0:
		d.tel.Log(slog.LevelWarn, "dsync: redlock: an even number of nodes tolerates no more failures than one node fewer",
			slog.Int("nodes", len(nodes)), slog.Int("quorum", d.quorum))
	}
	return d, &o, nil
}

// NewFromClients is New over the options of clients the application
// already has, one per master (client.Options() of each): the same address,
// credentials, TLS, dialer, database and pool settings, and an OnConnect
// of the client's, chained before dsync's; not its push-notification
// processor or client-side cache, which are one client's own.
//
// The backend makes a client of its own per master from those options,
// set up as New sets up its clients; it does not send commands through the
// application's clients, and does not close them (it closes only the
// clients it created). It cannot use them as they are: the restart
// quarantine reads the server's run_id and uptime on every new connection,
// through a connection hook that only a client being made can be given,
// and dsync's one attempt per call needs MaxRetries -1 and
// ContextTimeoutEnabled (see redis.New for why), which the application's
// clients may not have. So each master gets a second connection pool, and
// hooks added to a client with AddHook (tracing, metrics) are not carried
// over.
//
// Each client must be a *redis.Client reaching one server; a Redis Cluster
// or Ring client is an *InvalidError, as a Redlock master is one server
// (independent of the others, without replication between them). It then
// fails as New fails.
func NewFromClients(ctx context.Context, clients []goredis.UniversalClient, opts *Options) (*dsync.Backend, error) {
	nodes, err := clientOptions(clients)
	if err != nil {
		return nil, err
	}
	return New(ctx, nodes, opts)
}

// clientOptions returns the options of NewFromClients' clients, for New.
func clientOptions(clients []goredis.UniversalClient) ([]*goredis.Options, error) {
	nodes := make([]*goredis.Options, len(clients))
	for i, c := range clients {
		switch c := c.(type) {
		case *goredis.Client:
			if c == nil {
				return nil, backends.Invalid("clients", "client %d is nil", i)
			}
			o := *c.Options()
			// State of the client's own that go-redis keeps in its
			// options: two clients cannot share it (the push processor
			// refuses a second client's handlers), and dsync's needs none
			// (the client-side cache).
			o.PushNotificationProcessor = nil
			o.ClientSideCache, o.ClientSideCacheConfig = nil, nil
			nodes[i] = &o
		case nil:
			return nil, backends.Invalid("clients", "client %d is nil", i)
		case *goredis.ClusterClient, *goredis.Ring:
			return nil, backends.Invalid("clients", "client %d is a %T, which spreads keys over several servers: a Redlock master is one server, so give one *redis.Client per master", i, c)
		default:
			return nil, backends.Invalid("clients", "client %d is a %T: Redlock takes a *redis.Client per master", i, c)
		}
	}
	return nodes, nil
}

// check validates o and the node list, and fills in MaxTTL's default.
func (o *Options) check(nodes []*goredis.Options) error {
	if len(nodes) == 0 {
		return backends.Invalid("nodes", "none given")
	}
	if len(nodes) > MaxNodes {
		return backends.Invalid("nodes", "%d given; at most %d are supported", len(nodes), MaxNodes)
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	if o.MaxTTL < 0 {
		return backends.Invalid("max ttl", "%v is negative", o.MaxTTL)
	}
	if o.NodeTimeout < 0 {
		return backends.Invalid("node timeout", "%v is negative", o.NodeTimeout)
	}
	if o.NodeTimeout > 0 && 2*o.NodeTimeout >= o.MaxTTL {
		return backends.Invalid("node timeout", "%v leaves no validity for a TTL of max_ttl %v (two rounds must fit well within the TTL)", o.NodeTimeout, o.MaxTTL)
	}
	seen := map[string]int{}
	for i, no := range nodes {
		if no == nil || no.Addr == "" {
			return backends.Invalid("nodes", "node %d has no address", i)
		}
		if j, dup := seen[no.Addr]; dup {
			return backends.Invalid("nodes", "%s is listed twice (nodes %d and %d)", no.Addr, j, i)
		}
		seen[no.Addr] = i
	}
	return nil
}

// probe pings every node (which also records its run_id) and rejects
// duplicates and a quorum that cannot be reached.
func (d *driver) probe(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	for i, n := range d.nodes {
		wg.Go(func() { errs[i] = n.client.Ping(ctx).Err() })
	}
	wg.Wait()
	var merr *multierror.Error
	byRunID := map[string]int{}
	for i, n := range d.nodes {
		if errs[i] != nil {
			merr = appendErr(merr, &NodeError{Index: i, Addr: n.addr, Err: errs[i]})
			continue
		}
		id := n.currentRunID()
		if j, dup := byRunID[id]; dup && id != "" {
			return backends.Invalid("nodes", "%s and %s are the same server (run_id %s)", d.nodes[j].addr, n.addr, id)
		}
		byRunID[id] = i
	}
	if up := len(d.nodes) - count(merr); up < d.quorum {
		return fmt.Errorf("%w: %d of %d nodes answered, %d needed: %w", ErrNoQuorum, up, len(d.nodes), d.quorum, merr.ErrorOrNil())
	}
	return nil
}

// Capabilities reports fencing, 1 ms TTLs, MaxTTL, and semaphores of up
// to MaxLimit slots.
func (d *driver) Capabilities() backends.Capabilities { return d.caps }

// Quorum is the number of nodes that must agree: N/2+1.
func (d *driver) Quorum() int { return d.quorum }

// Nodes lists the nodes' addresses, by index.
func (d *driver) Nodes() []string {
	out := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		out[i] = n.addr
	}
	return out
}

// CheckTTL implements backends.Driver: the TTL must fit two rounds of
// the per-node timeout, and not exceed MaxTTL.
func (d *driver) CheckTTL(ttl time.Duration) error {
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return err
	}
	_, err := d.timeoutFor(ttl)
	return err
}

// timeoutFor returns the per-node timeout for a TTL, or an *InvalidError if
// the TTL cannot fit two rounds of it.
func (d *driver) timeoutFor(ttl time.Duration) (time.Duration, error) {
	nt := d.nodeTimeout
	if nt == 0 {
		nt = min(max(time.Duration(float64(ttl)*defaultNodeTimeoutShare), minNodeTimeout), maxNodeTimeout)
	}
	if 2*nt >= ttl {
		return 0, backends.Invalid("ttl", "%v is too small for the redlock per-node timeout of %v (two rounds must fit well within the TTL)", ttl, nt)
	}
	return nt, nil
}

// QuarantineCheck returns an error matching ErrQuarantined, naming the
// nodes, when any node is in restart quarantine at now; nil otherwise.
func (d *driver) QuarantineCheck(now time.Time) error {
	var merr *multierror.Error
	for _, n := range d.nodes {
		if err := n.quarantined(now); err != nil {
			merr = appendErr(merr, &NodeError{Index: n.index, Addr: n.addr, Err: err})
		}
	}
	return merr.ErrorOrNil()
}

// nodeCtx bounds one node request by timeout and by Close, not by the
// caller's context: a fan-out returns when that ends, and its requests
// finish in the background.
func (d *driver) nodeCtx(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(d.ctx, timeout)
}

// Close stops the node requests still in flight, awaits every goroutine,
// and closes the nodes' clients. Holds are left to expire. Close is
// idempotent.
func (d *driver) Close() error {
	var err error
	d.once.Do(func() {
		d.closed.Store(true)
		d.cancel()
		d.pool.Stop()
		var merr *multierror.Error
		for _, n := range d.nodes {
			if e := n.close(); e != nil {
				merr = appendErr(merr, e)
			}
		}
		d.tel.Close()
		err = merr.ErrorOrNil()
	})
	return err
}
