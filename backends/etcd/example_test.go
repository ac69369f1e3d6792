package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/locker"
)

// A resource kept in etcd itself can refuse writes from anyone but the
// lock's current holder: the write is a transaction that compares the lock
// key's create revision with the lease's fencing token. A holder whose
// lease expired, or who released, has a token that no longer matches, even
// if it wakes up from a long pause convinced that it still holds the lock.
func Example_fencing() {
	ctx := context.Background()
	cluster, err := etcdtest.StartServer(ctx, nil) // an embedded etcd, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	b, err := dsync.Open(ctx, cluster.URL()+"/example") // etcd://127.0.0.1:PORT/example
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	lockKey, err := b.Driver().(*etcd.Driver).Key("report") // "example/report"
	if err != nil {
		log.Fatal(err)
	}

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
