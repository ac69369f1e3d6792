package semaphore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory" // registers memory://
	"github.com/dsync-dev/dsync/semaphore"
)

// At most two exports run at once, whichever replica starts them.
func Example() {
	ctx := context.Background()
	b, err := dsync.Open(ctx, "memory://example-semaphore") // redis://, redlock://, etcd:// alike
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	exports, err := semaphore.New(b, "exports", 2, &semaphore.Options{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	first, _ := exports.TryAcquire(ctx)
	second, _ := exports.TryAcquire(ctx)
	_, err = exports.TryAcquire(ctx)
	fmt.Println(err)

	_ = first.Release(ctx)
	err = dsync.Do(ctx, exports, func(ctx context.Context) error {
		fmt.Println("exporting; ctx is cancelled if the permit is lost")
		return nil
	})
	fmt.Println("done:", err)
	_ = second.Release(ctx)
	// Output:
	// dsync: not acquired: all 2 permits of "exports" are taken
	// exporting; ctx is cancelled if the permit is lost
	// done: <nil>
}
