// Package etcdtest runs embedded etcd members (go.etcd.io/etcd/server/v3/embed)
// in the test process, on loopback, for tests, fault injection and the CLI
// demo: one member for speed, or an N-member cluster whose members can be
// stopped and restarted.
//
// Every listener, client and peer, is on a port the kernel had free (never
// a fixed port), and every member's data lives in a temporary directory.
// Timing is tuned for speed: a 10 ms heartbeat and a 100 ms election
// timeout by default, which makes etcd's minimum lease TTL 1 s (see
// MinLeaseTTL). Members skip fsync unless Options.Fsync is set; data
// survives Stop, Kill and Restart within the process either way. Logging is
// off unless Options.Logger is set.
//
// Test packages that stop members check for goroutine leaks with
// leakcheck.VerifyTestMain, which gives etcd's peer connections time to close.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Defaults of Options.
const (
	DefaultTickMs        = 10
	DefaultElectionTicks = 10 // election timeout = DefaultElectionTicks * TickMs
)

const (
	readyTimeout  = 30 * time.Second // bound on the wait for a started cluster to serve
	startAttempts = 5                // port sets tried when one is taken before etcd binds it
)

var (
	// ErrClosed is returned by Restart after Close.
	ErrClosed = errors.New("etcdtest: cluster closed")
	// ErrNoLeader is returned by Leader when no running member leads within
	// the caller's context.
	ErrNoLeader = errors.New("etcdtest: no leader")

	errPortInUse = errors.New("etcdtest: port already in use")
)

// Options configure a cluster. A nil *Options means defaults.
type Options struct {
	// Members is the number of members. Default 1.
	Members int
	// TickMs is the heartbeat interval in milliseconds. Default 10.
	TickMs uint
	// ElectionMs is the election timeout in milliseconds, at least 5 ×
	// TickMs. Default 10 × TickMs.
	ElectionMs uint
	// Fsync makes members fsync their write-ahead log and database, as a
	// production etcd does. Default false (etcd's unsafe-no-fsync): faster,
	// and nothing is lost across Stop and Restart in one process; only a
	// machine crash would lose writes.
	Fsync bool
	// TLS serves clients over TLS with a throw-away certificate authority
	// and requires client certificates (see Cluster.TLS); peers talk plain
	// HTTP. Default false.
	TLS bool
	// Logger receives the members' logs. Default: none (a no-op logger).
	Logger *zap.Logger
}

func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Members == 0 {
		r.Members = 1
	}
	if r.TickMs == 0 {
		r.TickMs = DefaultTickMs
	}
	if r.ElectionMs == 0 {
		r.ElectionMs = DefaultElectionTicks * r.TickMs
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
	switch {
	case r.Members < 1:
		return r, fmt.Errorf("etcdtest: %d members", r.Members)
	case r.ElectionMs < 5*r.TickMs:
		return r, fmt.Errorf("etcdtest: election timeout %d ms is below 5 heartbeats of %d ms", r.ElectionMs, r.TickMs)
	}
	return r, nil
}

// Cluster is a set of embedded etcd members on 127.0.0.1, each with a
// client port, a peer port and a data directory that it keeps across
// restarts. Create it with StartServer or Start. Its methods are safe for
// concurrent use.
type Cluster struct {
	opts    Options
	dir     string // parent of the members' data directories
	ownsDir bool   // Close removes dir
	members []*member
	tls     *TLSFiles // nil without Options.TLS

	mu     sync.Mutex // protects closed and every member's etcd
	closed bool
}

// member is one etcd member. Its configuration is fixed at the first start
// and reused by every restart.
type member struct {
	name       string
	dir        string
	clientPort int
	peerPort   int
	etcd       *embed.Etcd // nil while stopped; guarded by Cluster.mu
}

// StartServer starts a cluster in a new temporary directory and blocks
// until every member serves clients, for at most 30 s or until ctx is done.
// If a free port it picked is taken before etcd binds it, it tries another
// set, a few times. On failure nothing is left running or on disk. The
// caller must Close the Cluster.
func StartServer(ctx context.Context, opts *Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	c, err := start(ctx, opts, dir, true)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return c, nil
}

func start(ctx context.Context, opts *Options, dir string, ownsDir bool) (*Cluster, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var tf *TLSFiles
	if o.TLS {
		if tf, err = writeTLSFiles(dir); err != nil {
			return nil, fmt.Errorf("etcdtest: certificates: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		c, err := tryStart(ctx, o, tf, dir, ownsDir)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

// tryStart starts every member on a fresh set of free ports and waits for
// them to serve. On failure it stops what it started and empties dir.
func tryStart(ctx context.Context, o Options, tf *TLSFiles, dir string, ownsDir bool) (*Cluster, error) {
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, dir: dir, ownsDir: ownsDir, tls: tf}
	for i := range o.Members {
		c.members = append(c.members, &member{
			name:       "m" + strconv.Itoa(i),
			dir:        filepath.Join(dir, "m"+strconv.Itoa(i)),
			clientPort: ports[2*i],
			peerPort:   ports[2*i+1],
		})
	}
	fail := func(err error) (*Cluster, error) {
		c.stopAll()
		for _, m := range c.members {
			err = errors.Join(err, os.RemoveAll(m.dir))
		}
		return nil, err
	}
	for _, m := range c.members {
		e, err := embed.StartEtcd(c.config(m))
		if err != nil {
			if isAddrInUse(err) {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return fail(fmt.Errorf("etcdtest: starting member %s: %w", m.name, err))
		}
		m.etcd = e
	}
	for _, m := range c.members {
		if err := awaitReady(ctx, m.etcd, m.name); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// freePorts returns n distinct loopback ports that the kernel had free a
// moment ago: all n listeners are open at once, so the ports differ.
func freePorts(n int) ([]int, error) {
	var (
		ports []int
		errs  []error
	)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			errs = append(errs, err)
			break
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("etcdtest: %w", errors.Join(errs...))
	}
	return ports, nil
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func loopbackURL(scheme string, port int) url.URL {
	return url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// config is m's embed configuration; the same for every start, so that a
// restart keeps ports, directory and cluster membership.
func (c *Cluster) config(m *member) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.TickMs = c.opts.TickMs
	cfg.ElectionMs = c.opts.ElectionMs
	cfg.UnsafeNoFsync = !c.opts.Fsync
	scheme := "http"
	if c.tls != nil {
		scheme = "https"
		cfg.ClientTLSInfo.CertFile = c.tls.serverCert
		cfg.ClientTLSInfo.KeyFile = c.tls.serverKey
		cfg.ClientTLSInfo.TrustedCAFile = c.tls.CA
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	client, peer := loopbackURL(scheme, m.clientPort), loopbackURL("http", m.peerPort)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	var initial []string
	for _, o := range c.members {
		peer := loopbackURL("http", o.peerPort)
		initial = append(initial, o.name+"="+peer.String())
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = "etcdtest-" + filepath.Base(c.dir)
	// Nothing the tests use, and it starts goroutines of its own.
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.opts.Logger)
	return cfg
}

// awaitReady blocks until member name, run by e, serves clients, stops,
// 30 s pass or ctx is done.
func awaitReady(ctx context.Context, e *embed.Etcd, name string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcdtest: member %s failed during startup: %w", name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("etcdtest: member %s stopped during startup", name)
	case <-ctx.Done():
		return fmt.Errorf("etcdtest: member %s not ready: %w", name, ctx.Err())
	}
}

// Size is the number of members, running or not.
func (c *Cluster) Size() int { return len(c.members) }

// Endpoint returns member i's client address, "127.0.0.1:PORT". The port
// stays the same across restarts.
func (c *Cluster) Endpoint(i int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.members[i].clientPort))
}

// Endpoints returns every member's client address, running or not, in
// member order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i := range c.members {
		eps[i] = c.Endpoint(i)
	}
	return eps
}

// URL returns "etcd://127.0.0.1:P1,127.0.0.1:P2,...", every member's client
// address, for dsync.Open. With Options.TLS it is an etcds:// URL with the
// ca_file, cert_file and key_file options.
func (c *Cluster) URL() string {
	hosts := strings.Join(c.Endpoints(), ",")
	if c.tls == nil {
		return "etcd://" + hosts
	}
	q := url.Values{"ca_file": {c.tls.CA}, "cert_file": {c.tls.ClientCert}, "key_file": {c.tls.ClientKey}}
	return "etcds://" + hosts + "?" + q.Encode()
}

// TLS returns the certificate files of a cluster started with Options.TLS,
// or nil.
func (c *Cluster) TLS() *TLSFiles { return c.tls }

// MinLeaseTTL is the shortest lease TTL the members grant: etcd raises any
// shorter TTL to 1.5 election timeouts, rounded up to whole seconds (1 s
// with the default timing; 2 s for a production etcd's default 1 s
// election timeout).
func (c *Cluster) MinLeaseTTL() time.Duration {
	electionTicks := c.opts.ElectionMs / c.opts.TickMs
	min := time.Duration(3*electionTicks/2) * time.Duration(c.opts.TickMs) * time.Millisecond
	return time.Duration(math.Ceil(min.Seconds())) * time.Second
}

// ClientConfig returns a client configuration for every member, with a
// no-op logger, a 5 s dial timeout and, with Options.TLS, the client
// certificate.
func (c *Cluster) ClientConfig() (clientv3.Config, error) {
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if c.tls != nil {
		tc, err := c.tls.clientTLS()
		if err != nil {
			return cfg, fmt.Errorf("etcdtest: %w", err)
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// NewClient returns a client of every member; the caller closes it, before
// closing the cluster (a member waits up to its request timeout, about 5 s,
// for streams that clients keep open).
func (c *Cluster) NewClient() (*clientv3.Client, error) {
	cfg, err := c.ClientConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(cfg)
}

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].etcd != nil
}

// Stop stops member i gracefully (a leader first hands its leadership to
// another member), keeping its ports and data for Restart. It takes about a
// second while other members run: etcd waits that long for their
// connections to close. Stopping a stopped member does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(c.members[i])
}

// Kill stops member i abruptly, keeping its ports and data for Restart: its
// raft loop stops at once, so a leader hands nothing over and the others
// elect a new leader after an election timeout. Connections it served are
// then closed. Killing a stopped member does nothing.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killLocked(c.members[i])
}

func (c *Cluster) killLocked(m *member) {
	if m.etcd == nil {
		return
	}
	m.etcd.Server.HardStop()
	c.stopLocked(m)
}

func (c *Cluster) stopLocked(m *member) {
	if m.etcd == nil {
		return
	}
	m.etcd.Close()
	m.etcd = nil
}

// stopAll kills every running member, concurrently: a leader stopping
// gracefully would wait up to its request timeout (5 s) to hand leadership
// over to members that are stopping too.
func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.etcd != nil {
			wg.Go(func() { c.killLocked(m) })
		}
	}
	wg.Wait()
}

// Restart starts member i again, on the same ports with the same data, and
// blocks until it serves clients (which needs a quorum of members running)
// or ctx is done. A running member is stopped first. If another process took
// one of its ports meanwhile, Restart fails.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	m := c.members[i]
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.stopLocked(m)
	e, err := embed.StartEtcd(c.config(m))
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("etcdtest: restarting member %s: %w", m.name, err)
	}
	m.etcd = e
	c.mu.Unlock()

	// Not under c.mu: Leader and Running stay usable while the member
	// waits for a quorum.
	if err := awaitReady(ctx, e, m.name); err != nil {
		c.mu.Lock()
		if m.etcd == e {
			c.stopLocked(m)
		}
		c.mu.Unlock()
		return err
	}
	return nil
}

// Leader returns the index of the member that leads, as the running members
// see it, waiting until one does or ctx is done (ErrNoLeader then).
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	for {
		if i, ok := c.leader(); ok {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-time.After(time.Duration(c.opts.TickMs) * time.Millisecond):
		}
	}
}

// leader reports the running member that considers itself leader and whose
// leadership every other running member acknowledges.
func (c *Cluster) leader() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := -1
	var lead uint64
	for i, m := range c.members {
		if m.etcd == nil {
			continue
		}
		s := m.etcd.Server
		l := s.Lead()
		if l == 0 || (lead != 0 && l != lead) {
			return -1, false
		}
		lead = l
		if uint64(s.MemberID()) == l {
			idx = i
		}
	}
	return idx, idx >= 0
}

// Close stops every member and, for a cluster from StartServer, removes its
// data. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.stopAll()
	if c.ownsDir {
		return os.RemoveAll(c.dir)
	}
	return nil
}
