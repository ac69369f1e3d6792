package torture

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// Redlock timing of the scenarios: a max_ttl (the restart quarantine) of
// 2s, so that fresh and restarted nodes vote again soon, and a per-node
// timeout well above loopback latency under the race detector.
const (
	rlMaxTTL      = 2 * time.Second
	rlNodeTimeout = 150 * time.Millisecond
)

// system is a backend under test: its servers, started for one test.
type system struct {
	name    string
	ttl     time.Duration         // the workers' TTL
	slack   time.Duration         // Spec.UnavailSlack
	redis   []*redistest.Server   // the single server, or the Redlock nodes
	cluster *etcdtest.Cluster     // etcd
	query   []string              // Redlock URL options
	proxies [][]*faultproxy.Proxy // per proxied(): one per server
	t       *testing.T
}

// backends are the systems every generic scenario runs on.
var allBackends = []string{"redis", "redlock", "etcd"}

// newSystem starts the servers of the named backend.
func newSystem(t *testing.T, name string) *system {
	t.Helper()
	s := &system{name: name, t: t, ttl: time.Second, slack: 2 * time.Second}
	switch name {
	case "redis":
		s.redis = []*redistest.Server{redistest.Start(t, nil)}
	case "redlock":
		s.redis = redistest.StartN(t, 5, nil)
		s.query = []string{fmt.Sprintf("max_ttl=%v", rlMaxTTL), fmt.Sprintf("node_timeout=%v", rlNodeTimeout)}
	case "etcd":
		// A slower heartbeat than etcdtest's default: the members run in
		// the test process, which shares two cores with the workers of 4
		// scenarios at once, and a starved follower that calls an election
		// moves the leader, which renews every lease for its full TTL.
		s.cluster = etcdtest.Start(t, &etcdtest.Options{Members: 3, TickMs: 50, ElectionMs: 500})
		// Each change of etcd leader restarts the TTL of every lease (the
		// new leader cannot know how much of it the old one had counted).
		s.slack = 4 * time.Second
	default:
		t.Fatalf("unknown backend %q", name)
	}
	return s
}

func (s *system) addrs() []string {
	if s.cluster != nil {
		return s.cluster.Endpoints()
	}
	var out []string
	for _, r := range s.redis {
		out = append(out, r.Addr())
	}
	return out
}

func (s *system) urlOf(addrs []string, extra ...string) string {
	switch s.name {
	case "redis":
		return "redis://" + addrs[0]
	case "redlock":
		return "redlock://" + strings.Join(addrs, ",") + "/?" + strings.Join(append(append([]string{}, s.query...), extra...), "&")
	}
	return "etcd://" + strings.Join(addrs, ",")
}

// url is the backend's URL, straight to its servers.
func (s *system) url(extra ...string) string { return s.urlOf(s.addrs(), extra...) }

// proxied returns a URL through a new proxy in front of each server, for
// one client, and the proxies.
func (s *system) proxied(extra ...string) (string, []*faultproxy.Proxy) {
	var ps []*faultproxy.Proxy
	var addrs []string
	for _, a := range s.addrs() {
		p := faultproxy.Start(s.t, a)
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	s.proxies = append(s.proxies, ps)
	return s.urlOf(addrs, extra...), ps
}

// spec is what the checks expect of prim on this backend.
func (s *system) spec(prim string) Spec {
	sp := Spec{Prim: prim, TTL: s.ttl, Fencing: true, UnavailSlack: s.slack}
	if prim == PrimSem {
		sp.Size = semSize
	}
	return sp
}

// node names Redis server i for a fault.
func (s *system) node(i int) (string, *redistest.Server) {
	return fmt.Sprintf("node %d", i), s.redis[i]
}

// forEach runs scenario as a parallel subtest on each backend of names
// (all of them when empty), in parallel with the other tests.
func forEach(t *testing.T, scenario func(t *testing.T, s *system), names ...string) {
	t.Parallel()
	if len(names) == 0 {
		names = allBackends
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scenario(t, newSystem(t, name))
		})
	}
}
