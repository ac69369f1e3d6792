package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// embedded is the set of throw-away servers dsync-demo and dsync-demo check
// start when no --url is given.
type embedded struct {
	single  *redistest.Server   // nil without redis-server
	masters []*redistest.Server // five Redlock masters; nil likewise
	cluster *etcdtest.Cluster   // three members, in this process
}

// startEmbedded starts a 3-member etcd cluster in this process and, when
// withRedis, one redis-server for the single Redis backend and five for
// Redlock, saying what it started in one line. cleanup stops whatever was
// started and removes its data; it is non-nil even on failure.
func startEmbedded(ctx context.Context, stdout, stderr io.Writer, withRedis bool) (*embedded, func(), int) {
	var (
		servers []*redistest.Server
		errs    []error
		e       = &embedded{}
		etcdErr error
		wg      sync.WaitGroup
		start   = time.Now()
	)
	if withRedis {
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
		fmt.Fprintln(stdout, "stopped the servers started here and removed their data")
	}
	for _, err := range append(errs, etcdErr) {
		if err != nil {
			fmt.Fprintf(stderr, "dsync: starting a server: %s\n", oneLine(err))
			return nil, cleanup, exitFail
		}
	}
	took := time.Since(start).Round(100 * time.Millisecond)
	if !withRedis {
		fmt.Fprintf(stdout, "started a 3-member etcd cluster on loopback in %v\n", took)
		return e, cleanup, exitOK
	}
	e.single, e.masters = servers[0], servers[1:]
	fmt.Fprintf(stdout, "started 6 redis-server processes (1 single Redis, 5 Redlock masters) and a 3-member etcd cluster on loopback in %v\n", took)
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
// demo's TTL so that a restarted master's quarantine is short.
func (e *embedded) redlockURL() string {
	return fmt.Sprintf("redlock://%s/?max_ttl=%v", strings.Join(e.masterAddrs(), ","), demoMaxTTL)
}
