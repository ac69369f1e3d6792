package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// Fault kinds a soak can inject (SoakConfig.Faults).
const (
	FaultPauseClient = "pause-client" // SIGSTOP a worker past its TTL
	FaultKillClient  = "kill-client"  // SIGKILL a worker (a new one takes its place)
	FaultKillNode    = "kill-node"    // kill a Redis node, restart it later (empty unless persistent)
	FaultRestartNode = "restart-node" // kill and restart a Redis node at once
	FaultPauseNode   = "pause-node"   // SIGSTOP a Redis node
	FaultLatency     = "latency"      // delay a worker's replies past its TTL
	FaultBlackhole   = "blackhole"    // drop a worker's traffic to every server
	FaultRefuse      = "refuse"       // refuse a worker's connections to every server
	FaultStopMember  = "stop-member"  // stop the etcd leader gracefully, restart it later
	FaultKillMember  = "kill-member"  // kill the etcd leader, restart it later
	FaultScriptFlush = "script-flush" // SCRIPT FLUSH on every Redis node
)

// FaultKinds lists every fault kind.
var FaultKinds = []string{
	FaultPauseClient, FaultKillClient, FaultKillNode, FaultRestartNode, FaultPauseNode,
	FaultLatency, FaultBlackhole, FaultRefuse, FaultStopMember, FaultKillMember, FaultScriptFlush,
}

// Target is the backend a soak runs against.
type Target struct {
	Name string // for the report: "redis", "redlock", "etcd" or the URL's scheme
	URL  string
	// Redis and Cluster are the servers behind URL when the caller started
	// them: node faults need them. Nil for a user's servers.
	Redis   []*redistest.Server
	Cluster *etcdtest.Cluster
}

// SafeFaults are the fault kinds under which target's backend promises
// safety, those a soak injects by default: a client paused or killed, its
// link slowed or cut; and, where the servers are at hand, what the backend
// is built to survive: for Redlock a minority of nodes killed, restarted
// or paused and script caches flushed, for etcd its leader stopped or
// killed, for single Redis its script cache flushed (a single Redis
// restarted without persistence forgets its holds: not safe).
func SafeFaults(t Target) []string {
	out := []string{FaultPauseClient, FaultKillClient}
	if unproxyable(t.URL) == "" {
		out = append(out, FaultLatency, FaultBlackhole)
	}
	switch {
	case t.Cluster != nil:
		out = append(out, FaultStopMember, FaultKillMember)
	case len(t.Redis) > 1:
		out = append(out, FaultKillNode, FaultRestartNode, FaultPauseNode, FaultScriptFlush)
	case len(t.Redis) == 1:
		out = append(out, FaultScriptFlush)
	}
	return out
}

// CheckFaults reports an error if a fault kind is unknown or cannot be
// injected on target (node faults need servers the caller started).
func CheckFaults(t Target, kinds []string) error {
	for _, k := range kinds {
		switch k {
		case FaultPauseClient, FaultKillClient:
		case FaultLatency, FaultBlackhole, FaultRefuse:
			if why := unproxyable(t.URL); why != "" {
				return fmt.Errorf("fault %q needs proxies between the workers and the servers of %s: %s", k, backends.RedactURL(t.URL), why)
			}
		case FaultKillNode, FaultRestartNode, FaultPauseNode, FaultScriptFlush:
			if len(t.Redis) == 0 {
				return fmt.Errorf("fault %q needs Redis servers started here (no --url)", k)
			}
		case FaultStopMember, FaultKillMember:
			if t.Cluster == nil {
				return fmt.Errorf("fault %q needs an etcd cluster started here (no --url)", k)
			}
		default:
			return fmt.Errorf("unknown fault %q (known: %s)", k, strings.Join(FaultKinds, ", "))
		}
	}
	return nil
}

// SoakConfig configures Soak.
type SoakConfig struct {
	Target    Target
	Spawn     Spawner
	Store     *Store
	StoreAddr string // the store's host:port, for the workers
	Prim      string // PrimLock, PrimSem or PrimElect
	Key       string
	Workers   int
	Size      int // semaphore size
	TTL       time.Duration
	Duration  time.Duration
	// Faults are the fault kinds the nemesis picks from, one at a time:
	// a quiet period of two TTLs, a fault held one to two TTLs (a pause
	// longer than the TTL), its healing. None: no nemesis.
	Faults []string
	// Progress, if set, receives a summary every Every (default 5s).
	Progress func(Summary)
	Every    time.Duration
}

// Summary is a soak's state, for a live report.
type Summary struct {
	Elapsed            time.Duration
	Holds, Unavailable int
	Accepted, Rejected int
	Faults             int    // injected so far
	Current            string // the fault in effect, or ""
	Violations         int    // found so far by the exclusion and term checks
}

func (s Summary) String() string {
	cur := ""
	if s.Current != "" {
		cur = " now: " + s.Current
	}
	return fmt.Sprintf("%4.0fs  holds %d  writes %d ok %d rejected  failed acquisitions %d  faults %d%s  violations %d",
		s.Elapsed.Seconds(), s.Holds, s.Accepted, s.Rejected, s.Unavailable, s.Faults, cur, s.Violations)
}

// soak is one soak run.
type soak struct {
	c     SoakConfig
	h     *Harness
	rng   *rand.Rand
	proxy bool // workers reach the servers through proxies of their own

	mu      sync.Mutex // protects links, n and current
	links   map[*Worker][]*faultproxy.Proxy
	n       int
	current string
}

// Soak runs workers of c.Prim on c.Target for c.Duration while the
// nemesis injects faults, then stops them and checks what happened. It
// returns an error only if the run could not be carried out; what the
// checks found is in the report. Cancelling ctx ends the run early, still
// checked.
func Soak(ctx context.Context, c SoakConfig) (*Report, error) {
	if err := CheckFaults(c.Target, c.Faults); err != nil {
		return nil, err
	}
	if c.Every <= 0 {
		c.Every = 5 * time.Second
	}
	b, err := dsync.Open(ctx, c.Target.URL)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	// The workers' settings, checked here rather than failing in every
	// worker.
	size := 1
	if c.Prim == PrimSem {
		size = c.Size
		_, err = semaphore.New(b, c.Key, c.Size, &semaphore.Options{TTL: c.TTL})
	} else {
		_, err = locker.New(b, c.Key, &locker.Options{TTL: c.TTL})
	}
	if err != nil {
		return nil, err
	}
	s := &soak{c: c, h: New(c.Spawn, c.Store), rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), links: map[*Worker][]*faultproxy.Proxy{}}
	for _, f := range c.Faults {
		s.proxy = s.proxy || f == FaultLatency || f == FaultBlackhole || f == FaultRefuse
	}
	defer s.closeProxies()
	for range c.Workers {
		if _, err := s.startWorker(); err != nil {
			s.h.Stop(context.Background(), 10*time.Second)
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.h.AwaitReady(rctx)
	cancel()
	if err != nil {
		s.h.Stop(context.Background(), 10*time.Second)
		return nil, err
	}

	runCtx, stop := context.WithTimeout(ctx, c.Duration)
	defer stop()
	var wg sync.WaitGroup
	if len(c.Faults) > 0 {
		wg.Go(func() { s.nemesis(runCtx) })
	}
	start := time.Now()
	tick := time.NewTicker(c.Every)
	defer tick.Stop()
	spec := Spec{Prim: c.Prim, Size: size, TTL: c.TTL, Fencing: lease.Driver(b).Capabilities().Fencing}
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
			if c.Progress != nil {
				c.Progress(s.summary(time.Since(start), spec))
			}
		}
	}
	wg.Wait()
	left := s.h.Stop(context.Background(), 30*time.Second)
	CheckReleased(context.Background(), left, b, c.Key, c.TTL+5*time.Second)
	rep, err := s.h.Check(context.Background(), Resource(c.Prim, c.Key), spec, left)
	if err != nil {
		return nil, err
	}
	rep.Title = fmt.Sprintf("dsync check: %s on %s, %d workers, %v", c.Prim, c.Target.Name, c.Workers, c.Duration)
	return rep, nil
}

func (s *soak) summary(elapsed time.Duration, spec Spec) Summary {
	hist := s.h.History()
	sum := Summary{Elapsed: elapsed, Holds: len(hist.Holds), Unavailable: len(hist.Unavailable), Faults: len(s.h.Spans())}
	for _, ho := range hist.Holds {
		for _, w := range ho.Writes {
			switch w.Outcome {
			case "ok":
				sum.Accepted++
			case "rejected":
				sum.Rejected++
			}
		}
	}
	sum.Violations = CheckExclusionOf(hist, spec).Count() + checkTerms(hist, spec).Count()
	s.mu.Lock()
	sum.Current = s.current
	s.mu.Unlock()
	return sum
}

// workerURL is the target's URL, through new proxies of the worker's own
// when proxy faults are on.
func (s *soak) workerURL() (string, []*faultproxy.Proxy, error) {
	if !s.proxy {
		return s.c.Target.URL, nil, nil
	}
	var ps []*faultproxy.Proxy
	u, err := proxyURL(s.c.Target.URL, func(addr string) (string, error) {
		p, err := faultproxy.New(addr)
		if err != nil {
			return "", err
		}
		ps = append(ps, p)
		return p.Addr(), nil
	})
	if err != nil {
		for _, p := range ps {
			p.Close()
		}
		return "", nil, err
	}
	return u, ps, nil
}

// defaultPorts are the ports of the schemes whose hosts may omit one.
var defaultPorts = map[string]string{"redis": "6379", "redlock": "6379", "etcd": "2379"}

// proxyURL rewrites rawURL so that every server address in it (the hosts,
// comma-separated, and any addr= option) is replaced by the address
// through returns for it; a host without a port gets its scheme's default
// first.
func proxyURL(rawURL string, through func(addr string) (string, error)) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if why := unproxyable(rawURL); why != "" {
		return "", fmt.Errorf("cannot put proxies in front of %s: %s", backends.RedactURL(rawURL), why)
	}
	proxy := func(addr string) (string, error) {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(addr, defaultPorts[u.Scheme])
		}
		return through(addr)
	}
	var hosts []string
	if u.Host != "" {
		for h := range strings.SplitSeq(u.Host, ",") {
			p, err := proxy(h)
			if err != nil {
				return "", err
			}
			hosts = append(hosts, p)
		}
	}
	u.Host = strings.Join(hosts, ",")
	q := u.Query()
	if addrs := q["addr"]; len(addrs) > 0 {
		for i, a := range addrs {
			if addrs[i], err = proxy(a); err != nil {
				return "", err
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// unproxyable says why the servers of rawURL cannot be reached through
// proxies on 127.0.0.1, or returns "" when they can.
func unproxyable(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "cannot parse: " + err.Error()
	}
	switch {
	case u.Scheme == "memory":
		return "memory:// has no servers"
	case u.Scheme == "rediss" || u.Scheme == "etcds" || u.Query().Get("tls") == "true":
		return "TLS would fail, since the servers' certificates name the servers, not the proxies"
	case defaultPorts[u.Scheme] == "":
		return fmt.Sprintf("the soak does not know the ports of scheme %q", u.Scheme)
	}
	return ""
}

func (s *soak) startWorker() (*Worker, error) {
	url, ps, err := s.workerURL()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	id := fmt.Sprintf("w%d", s.n)
	s.n++
	s.mu.Unlock()
	w, err := s.h.Start(url, WorkerConfig{
		ID: id, Prim: s.c.Prim, Key: s.c.Key, Store: s.c.StoreAddr, TTL: s.c.TTL, Size: max(s.c.Size, 1),
		Writes: 3, Work: s.c.TTL / 20, Gap: s.c.TTL / 100, AcquireTimeout: 5*s.c.TTL + 5*time.Second,
	})
	if err != nil {
		for _, p := range ps {
			p.Close()
		}
		return nil, err
	}
	s.mu.Lock()
	s.links[w] = ps
	s.mu.Unlock()
	return w, nil
}

func (s *soak) closeProxies() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range s.links {
		for _, p := range ps {
			p.Close()
		}
	}
}

// nemesis injects a fault at a time until ctx ends, healing each.
func (s *soak) nemesis(ctx context.Context) {
	ttl := s.c.TTL
	for {
		if !sleep(ctx, 2*ttl) {
			return
		}
		kind := s.c.Faults[s.rng.IntN(len(s.c.Faults))]
		f, ok := s.fault(kind)
		if !ok {
			continue
		}
		in, err := s.h.Inject(ctx, f)
		s.mu.Lock()
		s.current = in.Span().Name()
		s.mu.Unlock()
		if err == nil && f.Heal != nil {
			// Long enough for a paused client to outlive its lease.
			sleep(ctx, ttl+time.Duration(s.rng.Int64N(int64(ttl))))
		}
		_ = s.h.Heal(context.Background(), in) // its error is in the span
		s.mu.Lock()
		s.current = ""
		s.mu.Unlock()
		if kind == FaultKillClient && ctx.Err() == nil {
			_, _ = s.startWorker() // keep the pool's size; a failure shows as fewer holds
		}
	}
}

// fault builds a fault of kind on a random target.
func (s *soak) fault(kind string) (Fault, bool) {
	live := s.h.Live()
	if len(live) == 0 {
		return Fault{}, false
	}
	w := live[s.rng.IntN(len(live))]
	nodes := s.c.Target.Redis
	node := func() (string, *redistest.Server) {
		i := s.rng.IntN(len(nodes))
		return fmt.Sprintf("node %d", i), nodes[i]
	}
	switch kind {
	case FaultPauseClient:
		return PauseClient(w), true
	case FaultKillClient:
		return KillClient(w), true
	case FaultKillNode:
		return KillNode(node()), true
	case FaultRestartNode:
		return RestartNode(node()), true
	case FaultPauseNode:
		return PauseNode(node()), true
	case FaultLatency, FaultBlackhole, FaultRefuse:
		s.mu.Lock()
		ps := s.links[w]
		s.mu.Unlock()
		if len(ps) == 0 {
			return Fault{}, false
		}
		switch kind {
		case FaultLatency:
			return Latency(w.ID(), s.c.TTL+s.c.TTL/2, ps...), true
		case FaultBlackhole:
			return Blackhole(w.ID(), ps...), true
		}
		return Refuse(w.ID(), ps...), true
	case FaultStopMember, FaultKillMember:
		return StopMember(s.c.Target.Cluster, LeaderMember, kind == FaultKillMember), true
	case FaultScriptFlush:
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.Addr())
		}
		return ScriptFlush(addrs...), true
	}
	return Fault{}, false
}

// ParseFaults splits a comma-separated list of fault kinds; "" is none
// and "safe" stands for SafeFaults(t).
func ParseFaults(t Target, list string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "", "none":
		case "safe":
			out = append(out, SafeFaults(t)...)
		default:
			out = append(out, f)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out, CheckFaults(t, out)
}
