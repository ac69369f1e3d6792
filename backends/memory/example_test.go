package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
)

// A manual clock makes expiry deterministic: the first holder's TTL runs out
// only when the test says so.
func Example() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	d := memory.New(&memory.Options{Store: memory.NewStore(clock)})
	defer d.Close()

	lock := func(token string) backends.Request {
		return backends.Request{Key: "report", Token: token, TTL: 10 * time.Second, Fence: true}
	}
	g, _ := d.Acquire(ctx, lock("a"))
	fmt.Println("a holds, fence", g.Fence)
	_, err := d.Acquire(ctx, lock("b"))
	fmt.Println("b:", err)

	clock.Advance(10 * time.Second)
	g, _ = d.Acquire(ctx, lock("b"))
	fmt.Println("b holds, fence", g.Fence)
	fmt.Println("a releases:", d.Release(ctx, "report", "a"))
	// Output:
	// a holds, fence 1
	// b: dsync: not acquired
	// b holds, fence 2
	// a releases: dsync: not held
}
