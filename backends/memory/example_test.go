package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/locker"
)

// A manual clock makes expiry deterministic: the first holder's TTL runs out
// on the store only when the test says so.
func Example() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := memory.New(&memory.Options{Store: memory.NewStore(clock)})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	l, err := locker.New(b, "report", &locker.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}

	first, _ := l.TryAcquire(ctx)
	fmt.Println("first holds, token", first.Token())
	_, err = l.TryAcquire(ctx)
	fmt.Println("second:", err)

	clock.Advance(10 * time.Second)
	second, _ := l.TryAcquire(ctx)
	fmt.Println("second holds, token", second.Token())
	fmt.Println("first releases:", first.Release(ctx))
	// Output:
	// first holds, token 1
	// second: dsync: not acquired: "report" is held by another owner
	// second holds, token 2
	// first releases: dsync: not held
}
