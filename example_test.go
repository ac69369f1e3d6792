package dsync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory"
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
