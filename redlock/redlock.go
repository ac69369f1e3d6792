package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/deadline"
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
// ErrNotAcquired when they come from an acquisition.
var ErrNoQuorum = errors.New("dsync: redlock: quorum unreachable")

// Options configure a Driver. A nil *Options means defaults.
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
	// is quarantined until it is not. Default 1 minute.
	MaxTTL time.Duration
	// NoQuarantine lets restarted nodes vote at once. It is unsafe (a node
	// restarted without persistence can grant a held lock twice) and exists
	// for tests that show why quarantine is on by default.
	NoQuarantine bool
	// Logger receives configuration warnings (an even number of nodes).
	// Default slog.Default().
	Logger *slog.Logger
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

// MaxNodes is the most masters a Driver takes.
const MaxNodes = 64

// Driver is the Redlock driver over N independent Redis masters. It
// implements backends.Driver and backends.Notifier and is safe for
// concurrent use.
type Driver struct {
	nodes       []*node
	quorum      int
	nodeTimeout time.Duration // Options.NodeTimeout; zero: from the TTL
	maxTTL      time.Duration
	caps        backends.Capabilities

	// ctx parents every node request, so that Close can cut stragglers
	// short; wg counts the goroutines of fan-outs and stragglers, which
	// spawn starts.
	ctx    context.Context
	cancel context.CancelFunc
	clock  *deadline.Clock // bounds node requests: its contexts derive from ctx
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once

	// spawnMu orders every wg.Add before Close's wg.Wait or after none:
	// a WaitGroup must not be added to from zero while it is waited on.
	spawnMu  sync.Mutex
	stopping bool // Close has begun; protected by spawnMu

	idle chan func() // unbuffered: spawn hands f to a goroutine waiting here

	mu    sync.Mutex        // protects holds
	holds map[holdRef]*hold // while an attempt has nodes in flight
}

var (
	_ backends.Driver = (*Driver)(nil)
	_ backends.Driver = (*Driver)(nil)
)

// New connects to the nodes (one go-redis client each, configured from the
// given options) and probes them within ctx. It fails when fewer than a
// quorum answer, when two entries reach the same server (same run_id), or
// on invalid options. Each client is set up for dsync: no go-redis retries
// (one attempt per call), context deadlines honoured, and a connection hook
// that reads the server's run_id and uptime for the restart quarantine
// (chained after an OnConnect of the caller's).
func New(ctx context.Context, nodes []*goredis.Options, opts *Options) (*Driver, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if len(nodes) == 0 {
		return nil, backends.Invalid("nodes", "none given")
	}
	if len(nodes) > MaxNodes {
		return nil, backends.Invalid("nodes", "%d given; at most %d are supported", len(nodes), MaxNodes)
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	if o.MaxTTL < 0 {
		return nil, backends.Invalid("max ttl", "%v is negative", o.MaxTTL)
	}
	if o.NodeTimeout < 0 {
		return nil, backends.Invalid("node timeout", "%v is negative", o.NodeTimeout)
	}
	if o.NodeTimeout > 0 && 2*o.NodeTimeout >= o.MaxTTL {
		return nil, backends.Invalid("node timeout", "%v leaves no validity for a TTL of max_ttl %v (two rounds must fit well within the TTL)", o.NodeTimeout, o.MaxTTL)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	seen := map[string]int{}
	for i, no := range nodes {
		if no == nil || no.Addr == "" {
			return nil, backends.Invalid("nodes", "node %d has no address", i)
		}
		if j, dup := seen[no.Addr]; dup {
			return nil, backends.Invalid("nodes", "%s is listed twice (nodes %d and %d)", no.Addr, j, i)
		}
		seen[no.Addr] = i
	}

	d := &Driver{
		quorum:      len(nodes)/2 + 1,
		nodeTimeout: o.NodeTimeout,
		maxTTL:      o.MaxTTL,
		holds:       map[holdRef]*hold{},
		idle:        make(chan func()),
		caps: backends.Capabilities{
			ReleaseNotices: true,
			Name:           "redlock", MaxLimit: MaxLimit, Fencing: true,
			TTLResolution: time.Millisecond, MaxTTL: o.MaxTTL,
		},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.clock = deadline.NewClock(d.ctx)
	for i, no := range nodes {
		n, err := newNode(i, no, &o)
		if err != nil {
			_ = d.Close()
			return nil, err
		}
		d.nodes = append(d.nodes, n)
	}
	if err := d.probe(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	if len(nodes)%2 == 0 {
		o.Logger.Warn("dsync: redlock: an even number of nodes tolerates no more failures than one node fewer",
			"nodes", len(nodes), "quorum", d.quorum)
	}
	return d, nil
}

// probe pings every node (which also records its run_id) and rejects
// duplicates and a quorum that cannot be reached.
func (d *Driver) probe(ctx context.Context) error {
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
func (d *Driver) Capabilities() backends.Capabilities { return d.caps }

// Quorum is the number of nodes that must agree: N/2+1.
func (d *Driver) Quorum() int { return d.quorum }

// Nodes lists the nodes' addresses, by index.
func (d *Driver) Nodes() []string {
	out := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		out[i] = n.addr
	}
	return out
}

// CheckTTL implements backends.Driver: the TTL must fit two rounds of
// the per-node timeout, and not exceed MaxTTL.
func (d *Driver) CheckTTL(ttl time.Duration) error {
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return err
	}
	_, err := d.timeoutFor(ttl)
	return err
}

// timeoutFor returns the per-node timeout for a TTL, or an *InvalidError if
// the TTL cannot fit two rounds of it.
func (d *Driver) timeoutFor(ttl time.Duration) (time.Duration, error) {
	nt := d.nodeTimeout
	if nt == 0 {
		nt = min(max(time.Duration(float64(ttl)*defaultNodeTimeoutShare), minNodeTimeout), maxNodeTimeout)
	}
	if 2*nt >= ttl {
		return 0, backends.Invalid("ttl", "%v is too small for the redlock per-node timeout of %v (two rounds must fit well within the TTL)", ttl, nt)
	}
	return nt, nil
}

// hold tracks an acquisition attempt while some of its node requests are in
// flight, so that a hold applied after the attempt failed, or after the
// lease was released, is withdrawn from that node when its reply arrives.
type hold struct {
	t       target
	pending int  // node requests in flight; protected by Driver.mu
	decided bool // the attempt has returned; protected by Driver.mu
	keep    bool // it succeeded and the lease is not released; protected by Driver.mu
	// inFlight marks the nodes whose request has not landed, by index
	// (New allows at most MaxNodes); protected by Driver.mu.
	inFlight uint64
	// landing, when a release waits for a node's request to land, is
	// closed (and cleared) at the next landing; protected by Driver.mu.
	landing chan struct{}
}

// holdRef names an attempt in Driver.holds: the key it is known by (a
// slot's key for a semaphore slot) and its token, since one token tries
// several slots of a semaphore, one after the other.
type holdRef struct{ key, token string }

type vote struct {
	node    *node
	grant   backends.Grant
	err     error
	applied bool // the node set the key, even if its vote does not count
	// mayHold: the node may hold the key: applied, or its request failed
	// with an outcome unknown.
	mayHold bool
}

// refusedOutright reports a node's answer that leaves nothing behind on it:
// the key was held, or held with another limit.
func refusedOutright(err error) bool {
	var le *redis.LimitError
	return errors.Is(err, backends.ErrNotAcquired) || errors.As(err, &le)
}

// Acquire makes one Redlock attempt.
//
// For a lock (req.Limit at most 1) that is one round: SET NX PX with the
// request's token on all nodes in parallel, decided at quorum (N/2+1 of
// the configured N) or as soon as quorum is out of reach; then, if
// req.Fence and fewer than a quorum of the voters drew the token, the
// write-back round of the fencing token (see fence). A failed attempt is
// withdrawn from every node. A lock refused by a quorum of nodes on which
// a semaphore of the same key holds slots fails with the error of
// backends.LimitMismatch.
//
// For a semaphore (req.Limit above 1) it makes such a round on each of the
// semaphore's req.Limit slots in turn, starting from a random one, and
// stops at the first slot won: Grant.Key is then that slot's key, for
// Refresh and Release. A slot refused by a quorum is withdrawn from the
// nodes that may hold it before the next slot is tried, so a failed
// Acquire leaves nothing behind. It fails with ErrNotAcquired when every
// slot is refused, at once with an error matching ErrNoQuorum when fewer
// than a quorum of nodes answer, and with the error of
// backends.LimitMismatch when a quorum of nodes hold the key with another
// limit (1: its lock).
func (d *Driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, d.caps); err != nil {
		return backends.Grant{}, err
	}
	if err := checkKey(req.Key); err != nil {
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
	return d.acquireLock(ctx, req, nt)
}

func (d *Driver) acquireLock(ctx context.Context, req backends.Request, nt time.Duration) (backends.Grant, error) {
	t := lockTarget(req.Key)
	r := d.round(ctx, t, req, nt)
	ok := len(r.granted) >= d.quorum
	var fence uint64
	if ok && req.Fence {
		var err error
		if fence, err = d.fence(ctx, r, req.Key, nt); err != nil {
			d.decide(r, false)
			d.withdrawAll(t, req.Token, nt)
			return backends.Grant{}, fmt.Errorf("%w: %w: %w", backends.ErrNotAcquired, ErrNoQuorum, err)
		}
	}
	d.decide(r, ok)
	if !ok {
		if holders := d.withdrawLock(req.Key, req.Token, nt); holders > 0 {
			return backends.Grant{}, backends.LimitMismatch(req.Key, 1, holders)
		}
		return backends.Grant{}, d.notAcquired(ctx, len(r.granted), r.refused)
	}
	return r.result(fence, 0), nil
}

// round is one Redlock attempt on one target: its requests, sent to every
// node not quarantined, and the votes collected until it was decided.
type round struct {
	ref     holdRef
	h       *hold
	ttl     time.Duration
	votes   chan vote // buffered for every node
	seen    []vote    // the votes collected
	granted []vote
	refused *multierror.Error
}

// round sends req for t to every node not quarantined, in parallel, and
// collects votes until quorum is reached or out of reach, the per-node
// timeout passes, or ctx ends. The caller must decide the round.
func (d *Driver) round(ctx context.Context, t target, req backends.Request, nt time.Duration) *round {
	start := time.Now()
	r := &round{ref: holdRef{t.key, req.Token}, h: &hold{t: t}, ttl: req.TTL, votes: make(chan vote, len(d.nodes))}
	for _, n := range d.nodes {
		if err := n.quarantined(start); err != nil {
			r.votes <- vote{node: n, err: err}
			continue
		}
		d.mu.Lock()
		if r.h.pending == 0 {
			d.holds[r.ref] = r.h
		}
		r.h.pending++
		r.h.inFlight |= 1 << n.index
		d.mu.Unlock()
		started := d.spawn(func() {
			// A reply later than the TTL is moot: the key has expired
			// by then.
			g, err := t.acquire(d.clock.Detached(ctx, req.TTL), n, req)
			v := vote{node: n, grant: g, err: err, applied: err == nil, mayHold: err == nil || !refusedOutright(err)}
			if err == nil {
				// A request that found its connection broken by a restart
				// ran on a new one, whose hook has only now learned the
				// server's uptime: the check made before sending it was
				// about the previous process.
				if qerr := n.quarantined(time.Now()); qerr != nil {
					v.err = qerr
				}
			}
			d.landed(r.ref, r.h, v, r.votes)
		})
		if !started {
			d.landed(r.ref, r.h, vote{node: n, err: backends.ErrClosed}, r.votes)
		}
	}
	r.seen, r.granted, r.refused = d.collect(ctx, r.votes, start.Add(nt))
	return r
}

// seedSteps: a node seeds a missing fence counter from its clock rounded
// down to MaxTTL/seedSteps (see AcquireSeeded), so that nodes seeding a
// counter in the same round nearly always start it equal, and the round
// needs no write-back; the guarantee then asks the nodes' clocks to agree
// to within 7/8 of MaxTTL rather than all of it.
const seedSteps = 8

// fence returns the fencing counter of a won round: the largest among its
// voters. Unless a quorum of them drew that very counter, it is written
// back first, so that every later quorum meets a node holding it; when
// they did, those nodes hold it already.
func (d *Driver) fence(ctx context.Context, r *round, key string, nt time.Duration) (uint64, error) {
	var fence uint64
	drew := 0 // voters whose counter is fence
	for _, v := range r.granted {
		switch {
		case v.grant.Fence > fence:
			fence, drew = v.grant.Fence, 1
		case v.grant.Fence == fence:
			drew++
		}
	}
	if drew >= d.quorum {
		return fence, nil
	}
	return fence, d.raiseFence(ctx, key, fence, nt)
}

// result is the grant of a won round on slot (0 for a lock). Its fencing
// token is fence*MaxLimit + slot: permits won at the same time on
// different slots may draw the same counter (each takes the largest among
// its own voters), and the slot tells them apart, while a later counter
// still means a larger token (slot < MaxLimit).
func (r *round) result(fence uint64, slot int) backends.Grant {
	if fence > 0 {
		fence = fence*MaxLimit + uint64(slot)
	}
	g := backends.Grant{Fence: fence, TTL: r.ttl.Truncate(time.Millisecond)}
	for _, v := range r.granted {
		g.Voters = append(g.Voters, v.node.index)
	}
	slices.Sort(g.Voters)
	return g
}

// collect gathers votes until quorum is reached or out of reach, the
// per-node deadline passes, or ctx ends. A node that has not voted by then
// counts as a refusal.
func (d *Driver) collect(ctx context.Context, votes <-chan vote, deadline time.Time) (seen, granted []vote, refused *multierror.Error) {
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

// landed delivers a node's vote, or, once the attempt has been decided,
// withdraws a late hold that nobody will release otherwise.
func (d *Driver) landed(ref holdRef, h *hold, v vote, votes chan<- vote) {
	d.mu.Lock()
	h.pending--
	h.inFlight &^= 1 << v.node.index
	if h.pending == 0 {
		delete(d.holds, ref)
	}
	if h.landing != nil {
		close(h.landing)
		h.landing = nil
	}
	decided, keep := h.decided, h.keep
	if !decided {
		// Sent under mu, so that once the attempt is decided its every
		// vote is either in the channel or withdrawn here.
		votes <- v // buffered for every node: never blocks
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	if v.applied && !keep {
		_ = h.t.withdraw(d.clock.Detached(context.Background(), maxNodeTimeout), v.node, ref.token)
	}
}

// decide records a round's outcome for its stragglers.
func (d *Driver) decide(r *round, ok bool) {
	d.mu.Lock()
	r.h.decided, r.h.keep = true, ok
	d.mu.Unlock()
}

func (d *Driver) notAcquired(ctx context.Context, granted int, refused *multierror.Error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w: %w", backends.ErrNotAcquired, err, refused.ErrorOrNil())
	}
	// Nodes that refused outright answered; the others (down, slow, cut
	// off, quarantined) did not. A round decided early leaves some nodes
	// unheard, which says nothing about them.
	silent := 0
	for _, e := range refused.WrappedErrors() {
		if !refusedOutright(e) {
			silent++
		}
	}
	if silent > len(d.nodes)-d.quorum {
		return fmt.Errorf("%w: %w: %d of %d nodes answered, %d needed: %w",
			backends.ErrNotAcquired, ErrNoQuorum, len(d.nodes)-silent, len(d.nodes), d.quorum, refused.ErrorOrNil())
	}
	return fmt.Errorf("%w: %d of %d nodes granted, %d needed: %w", backends.ErrNotAcquired, granted, len(d.nodes), d.quorum, refused.ErrorOrNil())
}

// raiseFence writes the token back to every node that is not quarantined
// and succeeds once a quorum acknowledged.
func (d *Driver) raiseFence(ctx context.Context, key string, fence uint64, nt time.Duration) error {
	acks, errs := d.fanOut(ctx, nt, false, func(ctx context.Context, n *node) error {
		return n.drv.RaiseFence(ctx, key, fence)
	})
	if acks < d.quorum {
		return fmt.Errorf("fencing token write-back acknowledged by %d of %d nodes, %d needed: %w", acks, len(d.nodes), d.quorum, errs.ErrorOrNil())
	}
	return nil
}

// fanOut runs op on every node (every one, or those not quarantined) in
// parallel, each bounded by nt (and Close) but not by ctx, and returns how
// many succeeded and the others' errors once all have returned or ctx has
// ended; then the nodes that have not answered count as failed with ctx's
// error, and their op goes on in the background within nt.
func (d *Driver) fanOut(ctx context.Context, nt time.Duration, all bool, op func(context.Context, *node) error) (int, *multierror.Error) {
	_, ok, errs := fanOutValues(d, ctx, nt, all, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, op(ctx, n)
	})
	return ok, errs
}

// nodeResult is one node's answer in fanOutValues.
type nodeResult[T any] struct {
	i   int
	v   T
	err error
}

// fanOutValues is fanOut for ops that return a value: it also returns
// each node's value, by index (the zero value for a node that failed or
// did not answer in time). An op must not touch the caller's variables,
// since it may still run after fanOutValues has returned.
func fanOutValues[T any](d *Driver, ctx context.Context, nt time.Duration, all bool, op func(context.Context, *node) (T, error)) ([]T, int, *multierror.Error) {
	results := make(chan nodeResult[T], len(d.nodes))
	values := make([]T, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var waiting uint64 // by node index
	now := time.Now()
	for i, n := range d.nodes {
		if !all {
			if err := n.quarantined(now); err != nil {
				errs[i] = err
				continue
			}
		}
		started := d.spawn(func() {
			v, err := op(d.clock.Detached(ctx, nt), n)
			results <- nodeResult[T]{i, v, err}
		})
		if started {
			waiting |= 1 << i
		} else {
			errs[i] = backends.ErrClosed
		}
	}
collect:
	for waiting != 0 {
		select {
		case r := <-results:
			values[r.i], errs[r.i] = r.v, r.err
			waiting &^= 1 << r.i
		case <-ctx.Done():
			for i := range d.nodes {
				if waiting&(1<<i) != 0 {
					errs[i] = ctx.Err()
				}
			}
			break collect
		}
	}
	var merr *multierror.Error
	for i, err := range errs {
		if err != nil {
			merr = appendErr(merr, &NodeError{Index: i, Addr: d.nodes[i].addr, Err: err})
		}
	}
	return values, len(d.nodes) - count(merr), merr
}

// withdrawAll undoes a failed attempt on every node, in parallel, each
// bounded by nt, on a context of the driver's own (the caller's may be
// done), without release notices.
func (d *Driver) withdrawAll(t target, token string, nt time.Duration) {
	d.fanOut(d.ctx, nt, true, func(ctx context.Context, n *node) error {
		return t.withdraw(ctx, n, token)
	})
}

// withdrawLock is withdrawAll for a refused lock: it returns the limit of
// the semaphore whose slots hold key on a quorum of nodes (the most common
// one, should they differ), or 0.
func (d *Driver) withdrawLock(key, token string, nt time.Duration) int {
	_, errs := d.fanOut(d.ctx, nt, true, func(ctx context.Context, n *node) error {
		return n.drv.WithdrawLock(ctx, key, token)
	})
	return d.limitQuorum(errs)
}

// limitQuorum returns the most common limit among the *redis.LimitError
// refusals in errs when there are at least a quorum of them, else 0.
func (d *Driver) limitQuorum(errs *multierror.Error) int {
	limits := map[int]int{}
	total, best := 0, 0
	for _, e := range errs.WrappedErrors() {
		var le *redis.LimitError
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

// Release deletes the hold on every node in parallel (quarantined ones
// included), each bounded by the per-node timeout, and tells stragglers of
// its acquisition to release their node when their reply arrives. It
// returns nil when a quorum deleted it, ErrNotHeld when it was gone from
// more nodes than a quorum tolerates, and the nodes' errors otherwise. The
// release of a semaphore's slot (key is Grant.Key) wakes the semaphore's
// waiters.
func (d *Driver) Release(ctx context.Context, key, token string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	if key == "" || token == "" {
		return backends.Invalid("key or token", "empty")
	}
	t, err := parseKey(key)
	if err != nil {
		return err
	}
	d.mu.Lock()
	h := d.holds[holdRef{key, token}]
	d.mu.Unlock()
	nt, _ := d.timeoutFor(d.maxTTL)
	return d.quorumResult("release", d.fanOutCounted(ctx, nt, true, func(ctx context.Context, n *node) error {
		if h != nil {
			if !d.awaitLanding(ctx, h, n.index) {
				return fmt.Errorf("the acquisition's request was still in flight: %w", cmp.Or(ctx.Err(), context.DeadlineExceeded))
			}
			// The release gets a per-node timeout of its own after the
			// wait (at least 7/8 of it).
			ctx = d.clock.Detached(ctx, nt)
		}
		return t.release(ctx, n, token)
	}))
}

// awaitLanding waits until node i's acquisition request of h has landed
// (or was never sent), so that the release sent next cannot reach the node
// before the key it deletes; it reports whether it landed before ctx
// ended. If not, the request withdraws its key itself when it lands.
//
// Waiting saves a command per straggling node: without it the release and
// the straggler's withdrawal both went out (measured: about 1.5 extra
// scripts per uncontended cycle across 5 loopback masters, on one CPU).
func (d *Driver) awaitLanding(ctx context.Context, h *hold, i int) bool {
	for {
		d.mu.Lock()
		if h.inFlight&(1<<i) == 0 {
			d.mu.Unlock()
			return true
		}
		if h.landing == nil {
			h.landing = make(chan struct{})
		}
		landing := h.landing
		d.mu.Unlock()
		select {
		case <-landing:
		case <-ctx.Done():
			d.mu.Lock()
			landed := h.inFlight&(1<<i) == 0
			if !landed {
				h.keep = false
			}
			d.mu.Unlock()
			return landed
		}
	}
}

// Refresh resets the hold's TTL on every node that is not quarantined, in
// parallel; it succeeds when a quorum refreshed it. A hold gone from more
// nodes than a quorum tolerates is ErrNotHeld; expired keys are never
// re-created. For a semaphore's slot, key is Grant.Key.
func (d *Driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	if key == "" || token == "" {
		return backends.Invalid("key or token", "empty")
	}
	t, err := parseKey(key)
	if err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return err
	}
	nt, err := d.timeoutFor(ttl)
	if err != nil {
		return err
	}
	return d.quorumResult("refresh", d.fanOutCounted(ctx, nt, false, func(ctx context.Context, n *node) error {
		return t.refresh(ctx, n, token, ttl)
	}))
}

type counted struct {
	ok, notHeld int
	errs        *multierror.Error
}

func (d *Driver) fanOutCounted(ctx context.Context, nt time.Duration, all bool, op func(context.Context, *node) error) counted {
	ok, errs := d.fanOut(ctx, nt, all, op)
	c := counted{ok: ok, errs: errs}
	for _, e := range errs.WrappedErrors() {
		if errors.Is(e, backends.ErrNotHeld) {
			c.notHeld++
		}
	}
	return c
}

func (d *Driver) quorumResult(op string, c counted) error {
	n := len(d.nodes)
	switch {
	case c.ok >= d.quorum:
		return nil
	case c.notHeld > n-d.quorum:
		return fmt.Errorf("%w: %s: gone from %d of %d nodes: %w", backends.ErrNotHeld, op, c.notHeld, n, c.errs.ErrorOrNil())
	default:
		return fmt.Errorf("dsync: redlock: %s reached %d of %d nodes, %d needed: %w", op, c.ok, n, d.quorum, c.errs.ErrorOrNil())
	}
}

// Holder reports the holder of key that a quorum of nodes agrees on (the
// same token in the same place: the lock, or one slot of a semaphore), with
// the smallest TTL among those nodes; of several such holders of a
// semaphore, the one whose hold expires last. It returns ErrNotHeld when no
// hold has a quorum. It reads every node in one parallel round.
func (d *Driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	if key == "" {
		return backends.HolderInfo{}, backends.Invalid("key", "empty")
	}
	if err := checkKey(key); err != nil {
		return backends.HolderInfo{}, err
	}
	nt, _ := d.timeoutFor(d.maxTTL)
	holds, _, errs := fanOutValues(d, ctx, nt, false, func(ctx context.Context, n *node) ([]redis.SlotHold, error) {
		return n.drv.SlotHolds(ctx, key)
	})
	type place struct {
		slot  int
		token string
	}
	type agg struct {
		votes int
		info  backends.HolderInfo
	}
	byPlace := map[place]*agg{}
	for _, hs := range holds {
		for _, h := range hs {
			p := place{h.Slot, h.Token}
			a := byPlace[p]
			if a == nil {
				a = &agg{info: backends.HolderInfo{Value: h.Value, TTL: h.TTL}}
				byPlace[p] = a
			}
			a.votes++
			a.info.TTL = min(a.info.TTL, h.TTL)
		}
	}
	var best *agg
	for _, a := range byPlace {
		if a.votes >= d.quorum && (best == nil || a.info.TTL > best.info.TTL) {
			best = a
		}
	}
	if best != nil {
		return best.info, nil
	}
	if count(errs) > len(d.nodes)-d.quorum {
		return backends.HolderInfo{}, fmt.Errorf("%w: holder: %w", ErrNoQuorum, errs.ErrorOrNil())
	}
	return backends.HolderInfo{}, backends.ErrNotHeld
}

// Close stops the node requests still in flight, awaits every goroutine,
// and closes the nodes' drivers and clients. Holds are left to expire.
// Close is idempotent.
func (d *Driver) Close() error {
	var err error
	d.once.Do(func() {
		d.closed.Store(true)
		d.spawnMu.Lock()
		d.stopping = true
		d.spawnMu.Unlock()
		d.cancel()
		d.wg.Wait()
		var merr *multierror.Error
		for _, n := range d.nodes {
			if e := n.close(); e != nil {
				merr = appendErr(merr, e)
			}
		}
		err = merr.ErrorOrNil()
	})
	return err
}

// spawn runs f on a goroutine of the driver's, which Close awaits, unless
// Close has begun; it reports whether f was started. An idle goroutine
// left by an earlier f takes it when there is one: go-redis's call path
// is deep, and a fresh goroutine grows and copies its stack on every call
// (measured: a fifth of the client's CPU in an uncontended lock cycle on
// one CPU), while one that ran a call before has the stack already.
func (d *Driver) spawn(f func()) bool {
	d.spawnMu.Lock()
	defer d.spawnMu.Unlock()
	if d.stopping {
		return false
	}
	select {
	case d.idle <- f:
		return true
	default:
	}
	d.wg.Add(1)
	go d.work(f)
	return true
}

// workerIdle is how long a goroutine of spawn's waits for more work
// before it exits.
const workerIdle = 5 * time.Second

// work runs f, then the functions spawn hands it, until none comes for
// workerIdle or Close begins.
func (d *Driver) work(f func()) {
	defer d.wg.Done()
	var idle *time.Timer
	for {
		f()
		f = nil // not kept alive while idle
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case f = <-d.idle:
		case <-idle.C:
			return
		case <-d.ctx.Done():
			idle.Stop()
			return
		}
	}
}

// QuarantineCheck returns an error matching ErrQuarantined, naming the
// nodes, when any node is in restart quarantine at now; nil otherwise.
func (d *Driver) QuarantineCheck(now time.Time) error {
	var merr *multierror.Error
	for _, n := range d.nodes {
		if err := n.quarantined(now); err != nil {
			merr = appendErr(merr, &NodeError{Index: n.index, Addr: n.addr, Err: err})
		}
	}
	return merr.ErrorOrNil()
}

// appendErr aggregates per-node errors, formatted on one line.
func appendErr(merr *multierror.Error, errs ...error) *multierror.Error {
	merr = multierror.Append(merr, errs...)
	merr.ErrorFormat = func(errs []error) string {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return strings.Join(msgs, "; ")
	}
	return merr
}

// count is the number of errors in merr, which may be nil.
func count(merr *multierror.Error) int { return len(merr.WrappedErrors()) }
