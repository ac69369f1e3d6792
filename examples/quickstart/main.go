// Quickstart: pick a backend by URL, take a lock, do the work under it.
//
//	go run ./examples/quickstart                                 # memory backend
//	DSYNC_URL=redis://127.0.0.1:6379 go run ./examples/quickstart
//	DSYNC_URL=redlock://h1:6379,h2:6379,h3:6379 go run ./examples/quickstart
//	DSYNC_URL=etcd://127.0.0.1:2379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"   // registers etcd:// and etcds://
	_ "github.com/dsync-dev/dsync/backends/memory" // registers memory://
	_ "github.com/dsync-dev/dsync/backends/redis"  // registers redis:// and rediss://
	"github.com/dsync-dev/dsync/locker"
	_ "github.com/dsync-dev/dsync/redlock" // registers redlock://
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	url := os.Getenv("DSYNC_URL")
	if url == "" {
		url = "memory://quickstart"
	}
	b, err := dsync.Open(ctx, url)
	if err != nil {
		log.Fatal(err) // one line naming the problem; never the password
	}
	defer b.Close()

	l, err := locker.New(b, "nightly-report", &locker.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// Do acquires (blocking), auto-extends while the function runs, cancels
	// its context if the lock is lost, and releases at the end.
	err = dsync.Do(ctx, l, func(ctx context.Context) error {
		fmt.Println("holding the lock; doing the nightly report")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("done; lock released")
}
