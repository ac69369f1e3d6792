package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd" // registers etcd://
	"github.com/dsync-dev/dsync/locker"
)

// A resource kept in etcd itself can refuse writes from anyone but the
// lock's current holder: the write is a transaction that compares the lock
// key's create revision with the lease's fencing token. The lock's key
// follows the layout of the package documentation: the URL's prefix, then
// the lock's name. A holder whose lease expired, or who released, has a
// token that no longer matches, even if it wakes up from a long pause
// convinced that it still holds the lock.
func Example_fencing() {
	ctx := context.Background()
	addr, stop, err := startEtcd() // an embedded etcd, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	b, err := dsync.Open(ctx, "etcd://"+addr+"/example")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	const lockKey = "example/report" // the URL's prefix, then the lock's name

	// write stores the report if token is the current holder's.
	write := func(token uint64, report string) bool {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(lockKey), "=", int64(token))).
			Then(clientv3.OpPut("reports/nightly", report)).
			Commit()
		return err == nil && resp.Succeeded
	}

	l, err := locker.New(b, "report", &locker.Options{TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	first, err := l.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holder's write accepted:", write(first.Token(), "v1"))
	_ = first.Release(ctx) // or: its lease expired while it was paused

	second, err := l.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("tokens increase:", second.Token() > first.Token())
	fmt.Println("stale holder's write accepted:", write(first.Token(), "v2"))
	fmt.Println("new holder's write accepted:", write(second.Token(), "v3"))
	// Output:
	// holder's write accepted: true
	// tokens increase: true
	// stale holder's write accepted: false
	// new holder's write accepted: true
}

// startEtcd starts a one-member etcd inside the process, on free loopback
// ports, for the example; in an application, the cluster is yours. stop
// ends it and removes its data.
func startEtcd() (addr string, stop func(), err error) {
	hosts, err := freeLoopbackAddrs(2) // the client's port and the peers'
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "dsync-example-etcd-")
	if err != nil {
		return "", nil, err
	}
	client, peer := url.URL{Scheme: "http", Host: hosts[0]}, url.URL{Scheme: "http", Host: hosts[1]}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.TickMs, cfg.ElectionMs = 10, 100 // a leader within a fraction of a second
	cfg.UnsafeNoFsync = true             // its data is thrown away
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, errors.Join(err, os.RemoveAll(dir))
	}
	stop = func() {
		e.Close()
		_ = os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
		return hosts[0], stop, nil
	case err := <-e.Err():
		stop()
		return "", nil, err
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("etcd did not start within 30s")
	}
}

// freeLoopbackAddrs returns n distinct loopback addresses whose ports were
// free a moment ago.
func freeLoopbackAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are picked, so that they differ
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}
