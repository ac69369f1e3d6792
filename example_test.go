package dsync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory"
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

// fencedStore stands in for the resource a lock protects: it refuses a
// write whose fencing token is below the largest it has accepted.
type fencedStore struct{ last uint64 }

func (s *fencedStore) Write(token uint64, v string) error {
	if token < s.last {
		return fmt.Errorf("stale token %d (last %d): write of %q refused", token, s.last, v)
	}
	s.last = token
	return nil
}

// By hand: acquire, hand the fencing token to the protected resource,
// extend, release. A holder that lost its lease (paused past its TTL, say)
// writes with an older token than its successor, and the resource refuses.
func Example_fencing() {
	ctx := context.Background()
	b, _ := dsync.Open(ctx, "memory://example-fencing")
	defer b.Close()
	l, _ := locker.New(b, "ledger", &locker.Options{TTL: 50 * time.Millisecond, DriftMin: -1})
	store := &fencedStore{}

	old, _ := l.Acquire(ctx)
	fmt.Println("extend:", old.Extend(ctx))
	<-old.Done() // not extended again: lost when its validity runs out
	fmt.Println("old lease:", old.Err())

	cur, _ := l.Acquire(ctx)
	fmt.Println(store.Write(cur.Token(), "new"))
	fmt.Println(store.Write(old.Token(), "late")) // the old holder, waking up
	fmt.Println("release:", cur.Release(ctx))
	// Output:
	// extend: <nil>
	// old lease: dsync: lease lost: "ledger": its validity ran out
	// <nil>
	// stale token 1 (last 2): write of "late" refused
	// release: <nil>
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
