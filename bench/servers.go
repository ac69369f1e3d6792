package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// maxTTL is the Redlock masters' max_ttl: the longest lock TTL any client
// uses, and the restart quarantine waited out once after the masters start.
const maxTTL = lockTTL

// servers are the throw-away servers of one bench run: one redis-server for
// the single-instance libraries, five for the Redlock ones, and one
// embedded etcd member (no fsync: CPU, not this machine's disk, bounds a
// write), all on free loopback ports. Child processes inherit the bench
// program's CPU affinity, so `taskset -c 0 bench run` pins them too.
type servers struct {
	single  *redistest.Server
	masters []*redistest.Server
	etcd    *etcdtest.Cluster
	started time.Time
}

// startServers starts every server concurrently and blocks until all serve.
// On failure it stops whatever it started.
func startServers(ctx context.Context) (*servers, error) {
	redis := make([]*redistest.Server, 6)
	errs := make([]error, 7)
	s := &servers{}
	var wg sync.WaitGroup
	for i := range redis {
		wg.Go(func() { redis[i], errs[i] = redistest.StartServer(ctx, nil) })
	}
	wg.Go(func() { s.etcd, errs[6] = etcdtest.StartServer(ctx, nil) })
	wg.Wait()
	s.single, s.masters, s.started = redis[0], redis[1:], time.Now()
	if err := errors.Join(errs...); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close stops every server that was started and removes its data.
func (s *servers) close() {
	for _, r := range append([]*redistest.Server{s.single}, s.masters...) {
		if r != nil {
			_ = r.Close()
		}
	}
	if s.etcd != nil {
		_ = s.etcd.Close()
	}
}

func (s *servers) masterAddrs() []string {
	addrs := make([]string, len(s.masters))
	for i, m := range s.masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// redisURL, redlockURL and etcdURL are dsync's URLs of the servers.
func (s *servers) redisURL() string { return s.single.URL() }
func (s *servers) redlockURL() string {
	return fmt.Sprintf("redlock://%s/?max_ttl=%v", strings.Join(s.masterAddrs(), ","), maxTTL)
}
func (s *servers) etcdURL() string { return s.etcd.URL() }

// clients are the plain clients the peers and the floors share: go-redis
// clients with default options (as dsync's URLs open theirs) and an etcd
// client.
type clients struct {
	single  *goredis.Client
	masters []*goredis.Client
	etcd    *clientv3.Client
}

func newClients(s *servers) (*clients, error) {
	c := &clients{single: goredis.NewClient(&goredis.Options{Addr: s.single.Addr()})}
	for _, m := range s.masters {
		c.masters = append(c.masters, goredis.NewClient(&goredis.Options{Addr: m.Addr()}))
	}
	var err error
	if c.etcd, err = s.etcd.NewClient(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *clients) close() {
	for _, r := range append([]*goredis.Client{c.single}, c.masters...) {
		_ = r.Close()
	}
	if c.etcd != nil {
		_ = c.etcd.Close()
	}
}

// quarantined reports whether b's health report has a node in restart
// quarantine (only Redlock's nodes ever are).
func quarantined(ctx context.Context, b *dsync.Backend) bool {
	h, err := b.Health(ctx)
	if err != nil {
		return false
	}
	now := time.Now()
	for _, n := range h.Nodes {
		if n.QuarantinedUntil.After(now) {
			return true
		}
	}
	return false
}

// waitQuarantine blocks until dsync's Redlock counts every fresh master's
// vote: a master whose process is younger than max_ttl may have lost locks
// it held, so it does not vote before then.
func waitQuarantine(ctx context.Context, b *dsync.Backend) error {
	for quarantined(ctx, b) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
