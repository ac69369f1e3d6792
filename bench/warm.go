package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/locker"
)

// warmFences takes and releases, through b with fencing, one lock in
// every Redis Cluster hash slot, so that each of b's fence counters (one
// per slot and server, see internal/redisnode/fence.go) exists before
// anything is measured, as the fenced floor's one counter does after its
// first cycle. A slot's first hold seeds its counter from the server's
// clock, which costs that one hold about 3 µs more per server; with a
// fresh key per cycle, most cycles of a short run would otherwise pay it,
// which no long-lived deployment does.
func warmFences(ctx context.Context, b *dsync.Backend) error {
	const slots = 16384
	seen := make(map[string]bool, slots)
	var names []string
	for i := 0; len(names) < slots; i++ {
		name := "warm:" + strconv.Itoa(i)
		if k := redisnode.FenceKey("", name); !seen[k] {
			seen[k] = true
			names = append(names, name)
		}
	}
	work := make(chan string)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range work {
				l, err := locker.New(b, name, &locker.Options{TTL: lockTTL})
				if err == nil {
					var lease dsync.Lease
					if lease, err = l.TryAcquire(ctx); err == nil {
						err = lease.Release(ctx)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("warming the fence counters of %s: %w", b, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for _, name := range names {
		select {
		case work <- name:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}
