package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// embedded is the set of throw-away servers dsync-demo and dsync-demo check
// start when no --url is given.
type embedded struct {
	single  *redistest.Server   // nil when redis-server is not installed
	masters []*redistest.Server // five Redlock masters; nil likewise
	cluster *etcdtest.Cluster   // three members, in this process
}

// startEmbedded starts a 3-member etcd cluster in this process and, when
// redis-server is installed, one redis-server for the single Redis backend
// and five for Redlock, saying what it started. cleanup stops whatever was
// started and removes its data; it is non-nil even on failure.
func startEmbedded(ctx context.Context, stdout, stderr io.Writer) (*embedded, func(), int) {
	var (
		servers []*redistest.Server
		errs    []error
		e       = &embedded{}
		etcdErr error
		wg      sync.WaitGroup
	)
	_, noRedis := redistest.Lookup()
	if noRedis == nil {
		servers, errs = make([]*redistest.Server, 6), make([]error, 6)
		for i := range servers {
			wg.Go(func() { servers[i], errs[i] = redistest.StartServer(ctx, nil) })
		}
	}
	wg.Go(func() { e.cluster, etcdErr = etcdtest.StartServer(ctx, &etcdtest.Options{Members: 3}) })
	wg.Wait()
	cleanup := func() {
		for _, s := range servers {
			if s != nil {
				_ = s.Close()
			}
		}
		if e.cluster != nil {
			_ = e.cluster.Close()
		}
		fmt.Fprintln(stdout, "\nstopped the servers started here and removed their data")
	}
	for _, err := range append(errs, etcdErr) {
		if err != nil {
			fmt.Fprintf(stderr, "dsync: starting a server: %s\n", oneLine(err))
			return nil, cleanup, exitFail
		}
	}
	fmt.Fprintf(stdout, "started an embedded 3-member etcd cluster on %s\n", strings.Join(e.cluster.Endpoints(), ", "))
	if noRedis != nil {
		fmt.Fprintf(stdout, "redis-server is not installed, so the memory backend stands in for Redis\n(install it with: sudo apt-get install -y redis-server)\n")
		return e, cleanup, exitOK
	}
	e.single, e.masters = servers[0], servers[1:]
	fmt.Fprintf(stdout, "started 6 redis-server processes: %s for single Redis, %s for Redlock\n",
		e.single.Addr(), strings.Join(e.masterAddrs(), ", "))
	return e, cleanup, exitOK
}

func (e *embedded) masterAddrs() []string {
	var addrs []string
	for _, s := range e.masters {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// redlockURL is the URL of the five masters, with a max_ttl just above the
// demo's TTL so that the fresh masters' quarantine is short.
func (e *embedded) redlockURL() string {
	return fmt.Sprintf("redlock://%s/?max_ttl=%v", strings.Join(e.masterAddrs(), ","), demoMaxTTL)
}
