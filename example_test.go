package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
)

// Open a backend by URL, make a locker, and run a function under the lock.
func Example() {
	ctx := context.Background()
	b, err := dsync.Open(ctx, "memory://example") // e.g. redis://host:6379 in production
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	l, err := locker.New(b, "nightly-report", &locker.Options{TTL: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dsync.Do(ctx, l, func(ctx context.Context) error {
		fmt.Println("holding the lock")
		return nil
	})
	fmt.Println("released, err =", err)
	// Output:
	// holding the lock
	// released, err = <nil>
}

// A second contender cannot take a held lock; its error says why.
func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	b, _ := dsync.Open(ctx, "memory://example-try")
	defer b.Close()
	l, _ := locker.New(b, "job", nil)

	lease, _ := l.TryAcquire(ctx)
	fmt.Println("first token:", lease.Token())
	_, err := l.TryAcquire(ctx)
	fmt.Println(err)
	_ = lease.Release(ctx)
	lease, _ = l.TryAcquire(ctx)
	fmt.Println("after release, token:", lease.Token())
	_ = lease.Release(ctx)
	// Output:
	// first token: 1
	// dsync: not acquired: "job" is held by another owner
	// after release, token: 2
}

// Fencing: hand the lease's token to the resource you write, through a
// guard of package fence that refuses a token older than one it has seen.
// Here the resource is a Redis used as a data store (package fence guards
// SQL databases too, and fence/etcdfence etcd). A holder that lost its
// lease while paused writes with an older token than its successor, and
// the guard refuses the write with nothing written. Not run here: it needs
// a backend and a Redis server (the guards' tests run against real ones,
// and tests/fence has this story on SQLite, with its output).
func Example_fencing() {
	ctx := context.Background()
	b, err := dsync.Open(ctx, os.Getenv("DSYNC_URL")) // any backend: its package imported
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	l, err := locker.New(b, "ledger", nil)
	if err != nil {
		log.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"}) // the data store: any Redis
	defer rdb.Close()
	guard, err := fence.NewRedis(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}

	lease, err := l.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// The key carries the name in braces, so that on Redis Cluster it
	// shares the hash slot of the name's fence.
	err = guard.Set(ctx, "ledger", lease.Token(), "{ledger}:balance", "100", 0)
	switch {
	case errors.Is(err, fence.ErrStale):
		// A newer holder has written: this lease is lost. Nothing was
		// written; stop working on the ledger.
		fmt.Println(err)
	case err != nil:
		log.Fatal(err)
	}
}

// Observe reports the leader each time a read finds another one, "no
// leader" included, to any process that watches an election: it reads
// every ObserveInterval and at once on a release notice, and needs no
// candidate ID.
func Example_observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := dsync.Open(ctx, "memory://example-observe")
	defer b.Close()
	a, _ := leader.New(b, "scheduler", "worker-a", nil)
	watcher, _ := leader.NewObserver(b, "scheduler", nil)

	changes := watcher.Observe(ctx)
	fmt.Printf("leader: %q\n", (<-changes).ID)
	term, _ := a.Campaign(ctx)
	fmt.Printf("leader: %q\n", (<-changes).ID)
	_ = term.Resign(ctx)
	fmt.Printf("leader: %q\n", (<-changes).ID)
	// Output:
	// leader: ""
	// leader: "worker-a"
	// leader: ""
}
